package kubeletplugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// TimeSlicer sets the compute time-slice of a GPU: how long a CUDA context runs before
// the GPU switches to another one. go-nvml v0.13 has no call for it (its scheduler calls
// are for vGPU hosts only), so the real one runs nvidia-smi compute-policy (NvidiaSMI).
type TimeSlicer interface {
	// SetTimeSlice sets the GPU's interval, giving up when ctx ends.
	SetTimeSlice(ctx context.Context, gpuUUID string, interval api.TimeSliceInterval) error
}

// timeSliceTimeout bounds one setting of a time-slice whatever the caller's deadline:
// nvidia-smi answers in well under a second on a healthy node.
const timeSliceTimeout = 30 * time.Second

// nvidiaSMIOutputLimit is how much of nvidia-smi's output an error keeps.
const nvidiaSMIOutputLimit = 4 << 10

// timeSlices are the intervals a claim's devices ask for, by GPU UUID. Default is no
// request: the GPU keeps (or gets back) its default.
func timeSlices(pc *prepared.Claim) map[string]api.TimeSliceInterval {
	out := map[string]api.TimeSliceInterval{}
	for _, d := range pc.Devices {
		iv := api.TimeSliceInterval(d.CDI.TimeSlice)
		if iv == "" || iv == api.IntervalDefault || d.MIG != nil {
			continue
		}
		for _, g := range d.CDI.GPUs {
			out[g.UUID] = iv
		}
	}
	return out
}

// wantedTimeSlice is the interval the prepared claims other than except ask for on gpu. A
// claim released but for its GPUs' time-slices (TimeSlicesLeft) has no devices left, and
// asks for none.
func (s *state) wantedTimeSlice(gpu string, except types.UID) (api.TimeSliceInterval, *prepared.Claim) {
	for _, uid := range slices.Sorted(maps.Keys(s.cp.Claims)) {
		if uid == except {
			continue
		}
		if iv, ok := timeSlices(s.cp.Claims[uid])[gpu]; ok {
			return iv, s.cp.Claims[uid]
		}
	}
	return api.IntervalDefault, nil
}

// checkTimeSlices refuses a claim asking for another interval on a GPU than a claim
// prepared on it already has.
func (s *state) checkTimeSlices(pc *prepared.Claim) error {
	for gpu, iv := range timeSlices(pc) {
		if other, by := s.wantedTimeSlice(gpu, pc.UID); by != nil && other != iv {
			return fmt.Errorf("sharing.timeSlicing.interval: %s asked for GPU %s, which claim %s/%s prepared on this node runs with %s", iv, gpu, by.Namespace, by.Name, other)
		}
	}
	return nil
}

// applyTimeSlices sets the claim's intervals on its GPUs, for start-up recovery: under
// the node's lock, when nothing else runs.
func (s *state) applyTimeSlices(ctx context.Context, pc *prepared.Claim) error {
	want := timeSlices(pc)
	for _, gpu := range slices.Sorted(maps.Keys(want)) {
		iv := want[gpu]
		if err := s.timeSlicer.SetTimeSlice(ctx, gpu, iv); err != nil {
			return fmt.Errorf("setting the time-slice of GPU %s to %s: %w", gpu, iv, err)
		}
	}
	return nil
}

// timeSlicesToRelease are the GPUs whose time-slices the claim gives back when it is
// released: those of its devices that m says its prepare set (all with m nil), and those
// an earlier release left (TimeSlicesLeft), sorted.
func timeSlicesToRelease(pc *prepared.Claim, m *made) []string {
	gpus := slices.Clone(pc.TimeSlicesLeft)
	for gpu := range timeSlices(pc) {
		if m.setTimeSlice(gpu) && !slices.Contains(gpus, gpu) {
			gpus = append(gpus, gpu)
		}
	}
	slices.Sort(gpus)
	return gpus
}

// errTimeSlicesLeft says that a claim's earlier prepare or unprepare left its GPUs'
// time-slices to give back: finishRelease does, outside the node's lock.
var errTimeSlicesLeft = errors.New("the claim's GPUs have still to get their time-slices back from its earlier prepare or unprepare")

// finishRelease gives the GPUs that a released claim has left (TimeSlicesLeft) their
// time-slices back, outside the node's lock and within ctx, then forgets the claim. On
// failure the claim stays, with those GPUs alone, for the next try: the kubelet's, or
// the background repair's.
func (s *state) finishRelease(ctx context.Context, uid types.UID) error {
	gpus, err := s.timeSlicesLeft(uid)
	if err != nil || len(gpus) == 0 {
		return err
	}
	if err := s.resetTimeSlices(ctx, uid, gpus); err != nil {
		return err
	}
	unlock, err := s.lockLoaded()
	if err != nil {
		return err
	}
	defer unlock()
	if pc := s.cp.Claims[uid]; pc == nil || pc.State == prepared.PrepareCompleted || len(pc.TimeSlicesLeft) == 0 {
		return nil // another plugin instance finished it, or prepared the claim again
	}
	delete(s.cp.Claims, uid)
	return s.forget(uid)
}

// timeSlicesLeft are the GPUs whose time-slices a released claim has still to give back.
func (s *state) timeSlicesLeft(uid types.UID) ([]string, error) {
	unlock, err := s.lockLoaded()
	if err != nil {
		return nil, err
	}
	defer unlock()
	pc := s.cp.Claims[uid]
	if pc == nil || pc.State == prepared.PrepareCompleted {
		return nil, nil
	}
	return slices.Clone(pc.TimeSlicesLeft), nil
}

// resetTimeSlices gives each GPU the interval that the prepared claims other than uid
// ask for on it, or the default, outside the node's lock and within ctx. It goes on
// after a GPU that fails, and returns the failures.
func (s *state) resetTimeSlices(ctx context.Context, uid types.UID, gpus []string) error {
	var errs []error
	for _, gpu := range gpus {
		errs = append(errs, s.resetTimeSlice(ctx, uid, gpu))
	}
	return errors.Join(errs...)
}

// resetTimeSlice holds the GPU's lock from reading the interval to give it (under the
// node's lock, briefly) to setting it. A prepare sets its claim's interval under the same
// lock once the claim is recorded: a claim recorded before the read is in the interval
// read, and one recorded after has its interval set after this one.
func (s *state) resetTimeSlice(ctx context.Context, uid types.UID, gpu string) error {
	defer s.gpuLocks.lock(gpu)()
	iv, err := s.wantedNow(gpu, uid)
	if err != nil {
		return err
	}
	if err := s.timeSlicer.SetTimeSlice(ctx, gpu, iv); err != nil {
		return fmt.Errorf("setting the time-slice of GPU %s back to %s: %w", gpu, iv, err)
	}
	return nil
}

// wantedNow is wantedTimeSlice as the checkpoint has it now, read under the node's lock.
func (s *state) wantedNow(gpu string, except types.UID) (api.TimeSliceInterval, error) {
	unlock, err := s.lockLoaded()
	if err != nil {
		return "", err
	}
	defer unlock()
	iv, _ := s.wantedTimeSlice(gpu, except)
	return iv, nil
}

// resetTimeSlicesLocked is resetTimeSlices for start-up recovery, which holds the node's
// lock while nothing else runs; each nvidia-smi is bounded by timeSliceTimeout.
func (s *state) resetTimeSlicesLocked(uid types.UID, gpus []string) error {
	var errs []error
	for _, gpu := range gpus {
		iv, _ := s.wantedTimeSlice(gpu, uid)
		if err := s.timeSlicer.SetTimeSlice(context.Background(), gpu, iv); err != nil {
			errs = append(errs, fmt.Errorf("setting the time-slice of GPU %s back to %s: %w", gpu, iv, err))
		}
	}
	return errors.Join(errs...)
}

// pendingTimeSlices are the intervals a prepared claim still has to set on its GPUs, after
// the node's lock is released, and what its prepare changed, for a rollback.
type pendingTimeSlices struct {
	uid  types.UID
	ref  klog.ObjectRef
	want map[string]api.TimeSliceInterval
	made *made
}

// setTimeSlices sets a prepared claim's intervals outside the node's lock, each under its
// GPU's lock, so that a slow nvidia-smi holds up this claim alone (and the other time-slice
// changes of its GPUs), and gives up when ctx (the kubelet's request) ends. A claim whose
// intervals cannot be set is rolled back, the GPUs set before the failure included: those
// get their time-slices back after the node's lock is released again, whether or not ctx
// has ended (each nvidia-smi is bounded by timeSliceTimeout).
func (s *state) setTimeSlices(ctx context.Context, p *pendingTimeSlices) error {
	for _, gpu := range slices.Sorted(maps.Keys(p.want)) {
		if err := s.setTimeSlice(ctx, gpu, p.want[gpu]); err != nil {
			left, rerr := s.abandon(p)
			if left && rerr == nil {
				if rerr = s.finishRelease(context.WithoutCancel(ctx), p.uid); rerr != nil {
					rerr = fmt.Errorf("rolling back claim %s: %w", p.ref, rerr)
					s.repairs.failed(p.uid, p.ref, partRollback, rerr)
				}
			}
			return errors.Join(err, rerr)
		}
		p.made.timeSlices = append(p.made.timeSlices, gpu)
	}
	return nil
}

// setTimeSlice sets the GPU's interval under the GPU's lock.
func (s *state) setTimeSlice(ctx context.Context, gpu string, iv api.TimeSliceInterval) error {
	defer s.gpuLocks.lock(gpu)()
	if err := s.timeSlicer.SetTimeSlice(ctx, gpu, iv); err != nil {
		return fmt.Errorf("setting the time-slice of GPU %s to %s: %w", gpu, iv, err)
	}
	return nil
}

// restoreTimeSlices sets a prepared claim's intervals again (a GPU reset forgets them),
// for the background repair: outside the node's lock, each under its GPU's lock, within
// ctx. It goes on after a GPU that fails, and returns the failures.
func (s *state) restoreTimeSlices(ctx context.Context, uid types.UID) error {
	want, err := s.preparedTimeSlices(uid)
	if err != nil {
		return err
	}
	var errs []error
	for _, gpu := range slices.Sorted(maps.Keys(want)) {
		errs = append(errs, s.setTimeSlice(ctx, gpu, want[gpu]))
	}
	return errors.Join(errs...)
}

// preparedTimeSlices are the intervals the claim asks for when it is prepared.
func (s *state) preparedTimeSlices(uid types.UID) (map[string]api.TimeSliceInterval, error) {
	unlock, err := s.lockLoaded()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if pc := s.cp.Claims[uid]; pc != nil && pc.State == prepared.PrepareCompleted {
		return timeSlices(pc), nil
	}
	return nil, nil
}

// abandon rolls back, under the node's lock, a prepared claim whose time-slices could not
// be set: as far as its prepare got. left says the GPUs it set are left for finishRelease.
func (s *state) abandon(p *pendingTimeSlices) (left bool, err error) {
	unlock, err := s.lockLoaded()
	if err != nil {
		return false, err
	}
	defer unlock()
	pc := s.cp.Claims[p.uid]
	if pc == nil || pc.State != prepared.PrepareCompleted {
		return false, nil
	}
	left, err = s.rollback(pc, p.made)
	s.rollbackFailed(pc, err)
	return left, err
}

// NvidiaSMI sets time-slices with the node's nvidia-smi:
// nvidia-smi compute-policy -i <uuid> --set-timeslice=<0|1|2|3>.
type NvidiaSMI struct {
	// Binary is the path of nvidia-smi (the driver installation's).
	Binary string
}

// timeSliceValues are nvidia-smi's numbers for the intervals.
var timeSliceValues = map[api.TimeSliceInterval]int{
	api.IntervalDefault: 0, api.IntervalShort: 1, api.IntervalMedium: 2, api.IntervalLong: 3,
}

// SetTimeSlice implements TimeSlicer.
func (n NvidiaSMI) SetTimeSlice(ctx context.Context, gpuUUID string, interval api.TimeSliceInterval) error {
	v, ok := timeSliceValues[interval]
	if !ok {
		return fmt.Errorf("time-slice interval %q is not one of %v", interval, api.Intervals)
	}
	if _, err := os.Stat(n.Binary); err != nil {
		return fmt.Errorf("nvidia-smi %s: %w (set --nvidia-smi to its path under the driver root)", n.Binary, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeSliceTimeout)
	defer cancel()
	out := &headBuffer{limit: nvidiaSMIOutputLimit}
	cmd := exec.CommandContext(ctx, n.Binary, "compute-policy", "-i", gpuUUID, "--set-timeslice="+strconv.Itoa(v))
	cmd.Stdout, cmd.Stderr = out, out
	// Killed at ctx's end, it may leave a child holding its output open: stop reading then.
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", context.Cause(ctx), err)
		}
		return fmt.Errorf("%s compute-policy -i %s --set-timeslice=%d: %w: %s", n.Binary, gpuUUID, v, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// headBuffer keeps the first limit bytes written to it and drops the rest, so that a
// command's output costs bounded memory however much it writes. (It has no ReadFrom, so
// that io.Copy goes through Write.)
type headBuffer struct {
	buf       bytes.Buffer
	limit     int
	truncated bool
}

func (b *headBuffer) Write(p []byte) (int, error) {
	if room := b.limit - b.buf.Len(); room < len(p) {
		b.truncated = true
		b.buf.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *headBuffer) String() string {
	if b.truncated {
		return b.buf.String() + " [output truncated]"
	}
	return b.buf.String()
}

package kubeletplugin

import (
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

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// TimeSlicer sets the compute time-slice of a GPU: how long a CUDA context runs before
// the GPU switches to another one. go-nvml v0.13 has no call for it (its scheduler calls
// are for vGPU hosts only), so the real one runs nvidia-smi compute-policy (NvidiaSMI).
type TimeSlicer interface {
	SetTimeSlice(gpuUUID string, interval api.TimeSliceInterval) error
}

// timeSlices are the intervals a claim's devices ask for, by GPU UUID. Default is no
// request: the GPU keeps (or gets back) its default.
func timeSlices(pc *PreparedClaim) map[string]api.TimeSliceInterval {
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

// wantedTimeSlice is the interval the prepared claims other than except ask for on gpu.
func (s *state) wantedTimeSlice(gpu string, except types.UID) (api.TimeSliceInterval, *PreparedClaim) {
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
func (s *state) checkTimeSlices(pc *PreparedClaim) error {
	for gpu, iv := range timeSlices(pc) {
		if other, by := s.wantedTimeSlice(gpu, pc.UID); by != nil && other != iv {
			return fmt.Errorf("sharing.timeSlicing.interval: %s asked for GPU %s, which claim %s/%s prepared on this node runs with %s", iv, gpu, by.Namespace, by.Name, other)
		}
	}
	return nil
}

// applyTimeSlices sets the claim's intervals on its GPUs and returns the GPUs it set,
// those before a failure included.
func (s *state) applyTimeSlices(pc *PreparedClaim) (set []string, err error) {
	want := timeSlices(pc)
	for _, gpu := range slices.Sorted(maps.Keys(want)) {
		iv := want[gpu]
		if err := s.timeSlicer.SetTimeSlice(gpu, iv); err != nil {
			return set, fmt.Errorf("setting the time-slice of GPU %s to %s: %w", gpu, iv, err)
		}
		set = append(set, gpu)
	}
	return set, nil
}

// releaseTimeSlices gives the claim's GPUs that m says it set (all with m nil) back the
// interval the other prepared claims ask for, or the default.
func (s *state) releaseTimeSlices(pc *PreparedClaim, m *made) error {
	var errs []error
	for _, gpu := range slices.Sorted(maps.Keys(timeSlices(pc))) {
		if !m.setTimeSlice(gpu) {
			continue
		}
		iv, _ := s.wantedTimeSlice(gpu, pc.UID)
		if err := s.timeSlicer.SetTimeSlice(gpu, iv); err != nil {
			errs = append(errs, fmt.Errorf("setting the time-slice of GPU %s back to %s: %w", gpu, iv, err))
		}
	}
	return errors.Join(errs...)
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
func (n NvidiaSMI) SetTimeSlice(gpuUUID string, interval api.TimeSliceInterval) error {
	v, ok := timeSliceValues[interval]
	if !ok {
		return fmt.Errorf("time-slice interval %q is not one of %v", interval, api.Intervals)
	}
	if _, err := os.Stat(n.Binary); err != nil {
		return fmt.Errorf("nvidia-smi %s: %w (set --nvidia-smi to its path under the driver root)", n.Binary, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, n.Binary, "compute-policy", "-i", gpuUUID, "--set-timeslice="+strconv.Itoa(v)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s compute-policy -i %s --set-timeslice=%d: %w: %s", n.Binary, gpuUUID, v, err, strings.TrimSpace(string(out)))
	}
	return nil
}

package kubeletplugin_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

func timeSlicing(interval string) string {
	return "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {strategy: TimeSlicing, timeSlicing: {interval: " + interval + "}}"
}

func TestTimeSliceClaimSetsItsIntervalAndUnprepareRestoresTheDefault(t *testing.T) {
	n := newNode(t, "dgx-h100")
	d := n.newDriver(nil)
	c := n.allocate(gpuClaim("2", timeSlicing("Long")))
	mustPrepare(t, d, c)
	gpu2 := n.backendGPU(2)
	if got := n.timeSlices.interval(gpu2); got != api.IntervalLong {
		t.Fatalf("GPU 2 time-slice %s, want Long", got)
	}
	if got := env(n.spec(c).Devices[0].ContainerEdits)["GPUDRA_TIMESLICE"]; got != "Long" {
		t.Errorf("GPUDRA_TIMESLICE=%q, want Long", got)
	}
	if err := unprepare(t, d, c); err != nil {
		t.Fatal(err)
	}
	if got := n.timeSlices.interval(gpu2); got != api.IntervalDefault {
		t.Errorf("after unprepare GPU 2 time-slice %s, want Default", got)
	}
}

func TestClaimsWithoutAnIntervalLeaveTheTimeSliceAlone(t *testing.T) {
	n := newNode(t, "dgx-h100")
	d := n.newDriver(nil)
	for _, spec := range []string{wholeGPU, gpuClaim("3", timeSlicing("Default")), gpuClaim("4", mpsConfig), migClaim} {
		c := n.allocate(spec)
		mustPrepare(t, d, c)
		if err := unprepare(t, d, c); err != nil {
			t.Fatal(err)
		}
	}
	if n.timeSlices.calls != 0 {
		t.Errorf("time-slice set %d times (%v), want never", n.timeSlices.calls, n.timeSlices.intervals)
	}
}

func TestSharesOfOneGPUKeepItsIntervalUntilTheLastIsUnprepared(t *testing.T) {
	// HAMi-core enforces the shares (under MPS limits there is no time-slicing).
	n := newNode(t, "l40s-pcie", func(c *plugin.Config) { c.VGPULibrary = "/opt/hami/libvgpu.so" })
	d := n.newDriver(nil)
	gpu0 := n.backendGPU(0)
	share := func(interval string) string {
		return strings.Replace(shareClaim("8Gi", "30", timeSlicing(interval)), "gpu-share.gpudra.dev", "gpu-share.gpudra.dev\n      selectors:\n      - cel:\n          expression: device.attributes[\"gpu.gpudra.dev\"].index == 0", 1)
	}
	a, b, other := n.allocate(share("Short")), n.allocate(share("Short")), n.allocate(share("Long"))
	mustPrepare(t, d, a)
	mustPrepare(t, d, b)
	if _, err := prepare(t, d, other); err == nil || !strings.Contains(err.Error(), "sharing.timeSlicing.interval") || !strings.Contains(err.Error(), a.Name) {
		t.Errorf("a share asking Long on a GPU running Short: %v, want an error naming the field and %s", err, a.Name)
	}
	if err := unprepare(t, d, a); err != nil {
		t.Fatal(err)
	}
	if got := n.timeSlices.interval(gpu0); got != api.IntervalShort {
		t.Errorf("GPU 0 time-slice %s while %s still asks Short", got, b.Name)
	}
	if err := unprepare(t, d, b); err != nil {
		t.Fatal(err)
	}
	if got := n.timeSlices.interval(gpu0); got != api.IntervalDefault {
		t.Errorf("GPU 0 time-slice %s after its last claim, want Default", got)
	}
}

func TestTimeSliceIsSetAgainAtRestart(t *testing.T) {
	n := newNode(t, "dgx-h100")
	mustPrepare(t, n.newDriver(nil), n.allocate(gpuClaim("2", timeSlicing("Medium"))))
	gpu2 := n.backendGPU(2)
	n.timeSlices.intervals[gpu2] = api.IntervalDefault // a GPU reset forgets it
	n.newDriver(nil)
	if got := n.timeSlices.interval(gpu2); got != api.IntervalMedium {
		t.Errorf("after restart GPU 2 time-slice %s, want Medium", got)
	}
}

// A stand-in nvidia-smi that records its arguments.
func TestNvidiaSMISetsTheTimeSliceByNumber(t *testing.T) {
	dir := t.TempDir()
	bin, args := filepath.Join(dir, "nvidia-smi"), filepath.Join(dir, "args")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho \"$@\" >> "+args+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	smi := plugin.NvidiaSMI{Binary: bin}
	for _, iv := range []api.TimeSliceInterval{api.IntervalLong, api.IntervalDefault} {
		if err := smi.SetTimeSlice(context.Background(), "GPU-1234", iv); err != nil {
			t.Fatal(err)
		}
	}
	raw, _ := os.ReadFile(args)
	if want := "compute-policy -i GPU-1234 --set-timeslice=3\ncompute-policy -i GPU-1234 --set-timeslice=0\n"; string(raw) != want {
		t.Errorf("nvidia-smi called with %q, want %q", raw, want)
	}
	missing := plugin.NvidiaSMI{Binary: filepath.Join(dir, "no-such-smi")}
	if err := missing.SetTimeSlice(context.Background(), "GPU-1234", api.IntervalShort); err == nil || !strings.Contains(err.Error(), missing.Binary) {
		t.Errorf("missing nvidia-smi: %v, want an error naming %s", err, missing.Binary)
	}
}

// stuckNvidiaSMI is a stand-in nvidia-smi that creates the file started and then runs
// until the file release exists or it is killed.
func stuckNvidiaSMI(t *testing.T) (bin, started, release string) {
	t.Helper()
	dir := t.TempDir()
	bin, started, release = filepath.Join(dir, "nvidia-smi"), filepath.Join(dir, "started"), filepath.Join(dir, "release")
	script := "#!/bin/sh\ntouch " + started + "\nwhile [ ! -e " + release + " ]; do sleep 0.05; done\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, started, release
}

// stuckGuard bounds how long a test waits for what must happen before it declares the
// plugin stuck; it is no measure of speed.
const stuckGuard = 2 * time.Minute

func prepareAsync(ctx context.Context, d *plugin.Driver, c *resourceapi.ResourceClaim) <-chan error {
	done := make(chan error, 1)
	go func() {
		out, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
		if err == nil {
			err = out[c.UID].Err
		}
		done <- err
	}()
	return done
}

// A claim whose nvidia-smi hangs holds up neither the node's other prepares nor, past the
// kubelet's deadline, its own: it is rolled back and the kubelet's next try prepares it.
func TestAStuckNvidiaSMIHoldsUpNoOtherPrepareAndEndsWithTheRequest(t *testing.T) {
	bin, started, release := stuckNvidiaSMI(t)
	releaseSMI := func() {
		if err := os.WriteFile(release, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	defer releaseSMI()
	n := newNode(t, "dgx-h100", func(c *plugin.Config) { c.TimeSlicer = plugin.NvidiaSMI{Binary: bin} })
	d := n.newDriver(nil)
	stuck, other := n.allocate(gpuClaim("2", timeSlicing("Long"))), n.allocate(gpuClaim("3", ""))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stuckDone := prepareAsync(ctx, d, stuck)
	for deadline := time.Now().Add(stuckGuard); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("nvidia-smi never ran for the time-slicing claim")
		}
	}
	select {
	case err := <-prepareAsync(context.Background(), d, other):
		if err != nil {
			t.Fatalf("prepare of a claim on another GPU: %v", err)
		}
	case <-time.After(stuckGuard):
		releaseSMI()
		t.Fatal("the prepare of a claim on another GPU waited for another claim's nvidia-smi")
	}
	cancel() // the kubelet's deadline
	select {
	case err := <-stuckDone:
		if err == nil || !strings.Contains(err.Error(), "context canceled") || !strings.Contains(err.Error(), "time-slice of GPU") {
			t.Errorf("prepare whose request ended: %v, want the time-slice's error with the context's", err)
		}
	case <-time.After(stuckGuard):
		releaseSMI()
		t.Fatal("prepare went on after its request ended")
	}
	if n.spec(stuck) != nil {
		t.Error("the claim whose time-slice could not be set kept its CDI spec")
	}
	releaseSMI()
	mustPrepare(t, d, stuck)
}

// nvidia-smi's output, which an error carries, costs bounded memory however much it writes.
func TestNvidiaSMIErrorKeepsABoundedPartOfItsOutput(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "nvidia-smi")
	script := "#!/bin/sh\nhead -c 10000000 /dev/zero | tr '\\0' x\nexit 3\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	err := plugin.NvidiaSMI{Binary: bin}.SetTimeSlice(context.Background(), "GPU-1234", api.IntervalLong)
	if err == nil || len(err.Error()) > 8<<10 || !strings.Contains(err.Error(), "output truncated") || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("nvidia-smi writing 10 MB and failing: error of %d bytes, want at most 8 KiB saying its exit status and that the output was truncated", len(fmt.Sprint(err)))
	}
}

// An unprepare whose nvidia-smi hangs ends with the kubelet's request, the claim kept for
// the kubelet's next try, which gives the GPU its default back.
func TestAStuckNvidiaSMIEndsUnprepareWithTheRequest(t *testing.T) {
	bin, started, release := stuckNvidiaSMI(t)
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	n := newNode(t, "dgx-h100", func(c *plugin.Config) { c.TimeSlicer = plugin.NvidiaSMI{Binary: bin} })
	d := n.newDriver(nil)
	c := n.allocate(gpuClaim("2", timeSlicing("Long")))
	mustPrepare(t, d, c)
	for _, f := range []string{started, release} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	defer func() { _ = os.WriteFile(release, nil, 0o644) }() // unblocks a stuck stand-in
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		out, err := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: c.UID}})
		if err == nil {
			err = out[c.UID]
		}
		done <- err
	}()
	for deadline := time.Now().Add(stuckGuard); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("nvidia-smi never ran for the unprepare")
		}
	}
	cancel() // the kubelet's deadline
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "context canceled") {
			t.Errorf("unprepare whose request ended: %v, want the time-slice's error with the context's", err)
		}
	case <-time.After(stuckGuard):
		t.Fatal("unprepare went on after its request ended")
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unprepare(t, d, c); err != nil {
		t.Fatalf("the kubelet's next unprepare: %v", err)
	}
	if n.spec(c) != nil {
		t.Error("the unprepared claim kept its CDI spec")
	}
}

// gatedTimeSlicer is the node's time-slicer with the settings of one GPU held while its
// gate is shut, until the test opens it or the caller's request ends. Each setting held
// is announced on entered. Every setting fails while fail is set.
type gatedTimeSlicer struct {
	*fakeTimeSlicer
	gpu     string
	entered chan api.TimeSliceInterval
	mu      sync.Mutex
	gate    chan struct{} // nil while open
	fail    error
}

// gateTimeSlices makes the node's time-slicer a gatedTimeSlicer (whose gpu the test sets).
func gateTimeSlices(g **gatedTimeSlicer) func(*plugin.Config) {
	return func(c *plugin.Config) {
		*g = &gatedTimeSlicer{fakeTimeSlicer: c.TimeSlicer.(*fakeTimeSlicer), entered: make(chan api.TimeSliceInterval, 16)}
		c.TimeSlicer = *g
	}
}

func (g *gatedTimeSlicer) SetTimeSlice(ctx context.Context, gpu string, iv api.TimeSliceInterval) error {
	g.mu.Lock()
	gate, fail := g.gate, g.fail
	g.mu.Unlock()
	if fail != nil {
		return fail
	}
	if gate != nil && gpu == g.gpu {
		g.entered <- iv
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.fakeTimeSlicer.SetTimeSlice(ctx, gpu, iv)
}

func (g *gatedTimeSlicer) failWith(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fail = err
}

func (g *gatedTimeSlicer) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate = make(chan struct{})
}

func (g *gatedTimeSlicer) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
}

// awaitEntered is the interval of the next setting the gate holds.
func (g *gatedTimeSlicer) awaitEntered(t *testing.T, what string) api.TimeSliceInterval {
	t.Helper()
	select {
	case iv := <-g.entered:
		return iv
	case <-time.After(stuckGuard):
		t.Fatalf("%s never ran nvidia-smi", what)
		return ""
	}
}

func unprepareAsync(ctx context.Context, d *plugin.Driver, c *resourceapi.ResourceClaim) <-chan error {
	done := make(chan error, 1)
	go func() {
		out, err := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: c.UID}})
		if err == nil {
			err = out[c.UID]
		}
		done <- err
	}()
	return done
}

// await is the result of a kubelet call that must end.
func await(t *testing.T, what string, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(stuckGuard):
		t.Fatalf("%s never returned", what)
		return nil
	}
}

// checkpointed is the state of each claim the node's checkpoint holds.
func checkpointed(t *testing.T, n *node) map[types.UID]prepared.State {
	t.Helper()
	claims, _, err := plugin.ReadCheckpoint(n.cfg.CheckpointDir)
	if err != nil {
		t.Fatal(err)
	}
	return claims
}

// While an unprepare waits for nvidia-smi to give its GPU the default time-slice back,
// a claim on another GPU is prepared and unprepared, time-slices included.
func TestAnUnprepareWaitingForNvidiaSMIHoldsUpNoOtherClaim(t *testing.T) {
	var gate *gatedTimeSlicer
	n := newNode(t, "dgx-h100", gateTimeSlices(&gate))
	gate.gpu = n.backendGPU(2)
	gpu3 := n.backendGPU(3)
	d := n.newDriver(nil)
	stuck, other := n.allocate(gpuClaim("2", timeSlicing("Long"))), n.allocate(gpuClaim("3", timeSlicing("Short")))
	mustPrepare(t, d, stuck)
	gate.shut()
	defer gate.open()
	stuckDone := unprepareAsync(context.Background(), d, stuck)
	if iv := gate.awaitEntered(t, "the unprepare"); iv != api.IntervalDefault {
		t.Fatalf("the unprepare set GPU 2 to %s, want Default", iv)
	}
	if err := await(t, "the prepare of a claim on another GPU, while an unprepare waited for nvidia-smi,", prepareAsync(context.Background(), d, other)); err != nil {
		t.Fatalf("prepare of a claim on another GPU: %v", err)
	}
	if got := n.timeSlices.interval(gpu3); got != api.IntervalShort {
		t.Errorf("GPU 3 time-slice %s, want Short", got)
	}
	if err := await(t, "the unprepare of a claim on another GPU, while an unprepare waited for nvidia-smi,", unprepareAsync(context.Background(), d, other)); err != nil {
		t.Fatalf("unprepare of a claim on another GPU: %v", err)
	}
	if got := n.timeSlices.interval(gpu3); got != api.IntervalDefault {
		t.Errorf("GPU 3 time-slice %s after its claim's unprepare, want Default", got)
	}
	select {
	case err := <-stuckDone:
		t.Fatalf("the unprepare returned (%v) before nvidia-smi did", err)
	default:
	}
	gate.open()
	if err := await(t, "the unprepare whose nvidia-smi returned", stuckDone); err != nil {
		t.Fatal(err)
	}
	if got := n.timeSlices.interval(gate.gpu); got != api.IntervalDefault {
		t.Errorf("GPU 2 time-slice %s after its claim's unprepare, want Default", got)
	}
	if got := checkpointed(t, n); len(got) != 0 {
		t.Errorf("checkpoint holds %v after both unprepares, want nothing", got)
	}
	if got := plugin.GPULocks(d); got != 0 {
		t.Errorf("%d GPU locks kept after every time-slice change ended, want 0", got)
	}
}

// A prepare on a GPU whose previous claim's unprepare is giving back its interval ends with
// the GPU at the prepared claim's interval, whichever nvidia-smi would have run last.
func TestAPrepareDuringAnUnprepareOnItsGPUEndsWithThePreparedInterval(t *testing.T) {
	var gate *gatedTimeSlicer
	n := newNode(t, "l40s-pcie", gateTimeSlices(&gate), func(c *plugin.Config) { c.VGPULibrary = "/opt/hami/libvgpu.so" })
	gate.gpu = n.backendGPU(0)
	recorded := make(chan struct{}, 4)
	d := n.newDriver(func(point string) error {
		if point == plugin.PointPrepareCompleted {
			recorded <- struct{}{}
		}
		return nil
	})
	share := func(interval string) string {
		return strings.Replace(shareClaim("8Gi", "30", timeSlicing(interval)), "gpu-share.gpudra.dev", "gpu-share.gpudra.dev\n      selectors:\n      - cel:\n          expression: device.attributes[\"gpu.gpudra.dev\"].index == 0", 1)
	}
	leaving, coming := n.allocate(share("Long")), n.allocate(share("Short"))
	mustPrepare(t, d, leaving)
	<-recorded
	gate.shut()
	defer gate.open()
	unprepared := unprepareAsync(context.Background(), d, leaving)
	// The unprepare holds the GPU from reading the interval to give back (none asked for:
	// the coming claim is not recorded yet) until nvidia-smi has set it.
	if iv := gate.awaitEntered(t, "the unprepare"); iv != api.IntervalDefault {
		t.Fatalf("the unprepare set GPU 0 to %s, want Default", iv)
	}
	prepared := prepareAsync(context.Background(), d, coming)
	select {
	case <-recorded:
	case err := <-prepared:
		t.Fatalf("the prepare of a claim asking Short on GPU 0, whose Long claim is being unprepared, returned before it was recorded: %v", err)
	case <-time.After(stuckGuard):
		t.Fatal("the prepare of a claim on GPU 0 was never recorded while its previous claim's unprepare waited for nvidia-smi")
	}
	select {
	case iv := <-gate.entered:
		t.Errorf("nvidia-smi set GPU 0 to %s while the unprepare's nvidia-smi was setting it", iv)
	case <-time.After(100 * time.Millisecond):
	}
	gate.open()
	if err := await(t, "the unprepare", unprepared); err != nil {
		t.Fatal(err)
	}
	if err := await(t, "the prepare", prepared); err != nil {
		t.Fatal(err)
	}
	if got := n.timeSlices.interval(gate.gpu); got != api.IntervalShort {
		t.Errorf("GPU 0 time-slice %s with only the Short claim prepared on it, want Short", got)
	}
	if err := unprepare(t, d, coming); err != nil {
		t.Fatal(err)
	}
	if got := n.timeSlices.interval(gate.gpu); got != api.IntervalDefault {
		t.Errorf("GPU 0 time-slice %s after its last claim, want Default", got)
	}
}

// A plugin killed after an unprepare released all but the GPU's time-slice gives the GPU
// its default back at start-up and forgets the claim.
func TestAnUnprepareKilledBeforeNvidiaSMIIsFinishedAtRestart(t *testing.T) {
	n := newNode(t, "dgx-h100")
	gpu2 := n.backendGPU(2)
	c := n.allocate(gpuClaim("2", timeSlicing("Long")))
	var reached bool
	d := n.newDriver(crashAt(plugin.PointTimeSlicesLeft, &reached))
	mustPrepare(t, d, c)
	if !run(t, func() { _ = unprepare(t, d, c) }) {
		t.Fatal("the unprepare never recorded the claim with its time-slice alone left")
	}
	if got := n.timeSlices.interval(gpu2); got != api.IntervalLong {
		t.Fatalf("GPU 2 time-slice %s when the plugin was killed, want Long (not given back yet)", got)
	}
	if got := checkpointed(t, n); got[c.UID] != prepared.UnprepareStarted {
		t.Fatalf("checkpoint holds %v when the plugin was killed, want the claim UnprepareStarted", got)
	}
	d = n.newDriver(nil)
	if got := n.timeSlices.interval(gpu2); got != api.IntervalDefault {
		t.Errorf("GPU 2 time-slice %s after the restart, want Default", got)
	}
	if got := checkpointed(t, n); len(got) != 0 {
		t.Errorf("checkpoint holds %v after the restart, want nothing", got)
	}
	if err := unprepare(t, d, c); err != nil {
		t.Fatalf("the kubelet's retried unprepare: %v", err)
	}
	assertClean(t, n, c)
}

// An unprepare whose nvidia-smi fails keeps the claim for the kubelet's next try, which
// gives the GPU back the interval the claims prepared on it then ask for. Its device is
// free meanwhile: a claim the scheduler gives the GPU next is prepared. A prepare of the
// claim itself (another pod of the claim) prepares it again.
func TestAFailedTimeSliceResetKeepsTheClaimForTheRetryAndFreesItsDevice(t *testing.T) {
	var ts *flakyTimeSlicer
	n := newNode(t, "dgx-h100", func(c *plugin.Config) {
		ts = &flakyTimeSlicer{fakeTimeSlicer: c.TimeSlicer.(*fakeTimeSlicer)}
		c.TimeSlicer = ts
	})
	gpu2 := n.backendGPU(2)
	d := n.newDriver(nil)
	first := n.allocate(gpuClaim("2", timeSlicing("Long")))
	mustPrepare(t, d, first)
	failedUnprepare := func() {
		t.Helper()
		ts.failWith(errors.New("nvidia-smi: GPU is busy"))
		defer ts.failWith(nil)
		if err := unprepare(t, d, first); err == nil || !strings.Contains(err.Error(), "GPU is busy") || !strings.Contains(err.Error(), gpu2) {
			t.Fatalf("unprepare whose nvidia-smi failed: %v, want the failure naming GPU %s", err, gpu2)
		}
		if got := checkpointed(t, n); got[first.UID] != prepared.UnprepareStarted {
			t.Fatalf("checkpoint holds %v after the failed unprepare, want the claim UnprepareStarted", got)
		}
		if n.spec(first) != nil {
			t.Error("the claim kept its CDI spec")
		}
	}
	failedUnprepare()
	mustPrepare(t, d, first)
	if n.spec(first) == nil || checkpointed(t, n)[first.UID] != prepared.PrepareCompleted {
		t.Errorf("the claim prepared again has CDI spec %v, checkpoint %v; want a spec and the claim PrepareCompleted", n.spec(first) != nil, checkpointed(t, n))
	}
	if got := n.timeSlices.interval(gpu2); got != api.IntervalLong {
		t.Errorf("GPU 2 time-slice %s with the claim prepared again, want Long", got)
	}
	failedUnprepare()
	// The scheduler gives GPU 2 to the next claim once the first is unprepared.
	n.alloc.Release(first.Status.Allocation)
	next := n.allocate(gpuClaim("2", timeSlicing("Short")))
	mustPrepare(t, d, next)
	if got := n.timeSlices.interval(gpu2); got != api.IntervalShort {
		t.Errorf("GPU 2 time-slice %s with the next claim prepared, want Short", got)
	}
	calls := n.timeSlices.callCount()
	if err := unprepare(t, d, first); err != nil {
		t.Fatalf("the kubelet's retried unprepare: %v", err)
	}
	if got := n.timeSlices.callCount() - calls; got != 1 {
		t.Errorf("the retried unprepare ran nvidia-smi %d times, want once (GPU 2)", got)
	}
	if got := n.timeSlices.interval(gpu2); got != api.IntervalShort {
		t.Errorf("GPU 2 time-slice %s after the retried unprepare, want the next claim's Short", got)
	}
	if got := checkpointed(t, n); len(got) != 1 || got[next.UID] != prepared.PrepareCompleted {
		t.Errorf("checkpoint holds %v, want the next claim alone", got)
	}
	if err := unprepare(t, d, next); err != nil {
		t.Fatal(err)
	}
	if got := n.timeSlices.interval(gpu2); got != api.IntervalDefault {
		t.Errorf("GPU 2 time-slice %s after its last claim, want Default", got)
	}
}

// twoGPUs is a claim for GPUs 2 and 3.
func twoGPUs(configYAML string) string {
	s := strings.Replace(wholeGPU, "exactly:\n", "exactly:\n      count: 2\n", 1)
	s = strings.Replace(s, "index == 2", "index >= 2 && device.attributes[\"gpu.gpudra.dev\"].index <= 3", 1)
	return s + withConfig("gpu", configYAML)
}

// rollbackTimeSlicer fails to set an interval on one GPU, and holds the settings of the
// default (a rollback's) on any GPU until the test opens its gate.
type rollbackTimeSlicer struct {
	*fakeTimeSlicer
	fail    string
	gate    chan struct{}
	entered chan string
}

func (r *rollbackTimeSlicer) SetTimeSlice(ctx context.Context, gpu string, iv api.TimeSliceInterval) error {
	if gpu == r.fail && iv != api.IntervalDefault {
		return errors.New("nvidia-smi: GPU is busy")
	}
	if iv == api.IntervalDefault {
		r.entered <- gpu
		<-r.gate
	}
	return r.fakeTimeSlicer.SetTimeSlice(ctx, gpu, iv)
}

// A prepare whose second GPU refuses its interval gives the first its default back
// outside the node's lock: a claim on another GPU is prepared meanwhile.
func TestARolledBackPrepareGivesBackItsTimeSlicesWithoutHoldingUpOtherClaims(t *testing.T) {
	var ts *rollbackTimeSlicer
	n := newNode(t, "dgx-h100", func(c *plugin.Config) {
		ts = &rollbackTimeSlicer{fakeTimeSlicer: c.TimeSlicer.(*fakeTimeSlicer), gate: make(chan struct{}), entered: make(chan string, 4)}
		c.TimeSlicer = ts
	})
	gpus := []string{n.backendGPU(2), n.backendGPU(3)}
	slices.Sort(gpus)
	ts.fail = gpus[1] // set after gpus[0]
	d := n.newDriver(nil)
	claim, other := n.allocate(twoGPUs(timeSlicing("Long"))), n.allocate(gpuClaim("5", ""))
	gate := sync.OnceFunc(func() { close(ts.gate) })
	defer gate()
	preparing := prepareAsync(context.Background(), d, claim)
	select {
	case gpu := <-ts.entered:
		if gpu != gpus[0] {
			t.Fatalf("the rollback gave GPU %s its default back, want %s (the GPU the prepare set)", gpu, gpus[0])
		}
	case err := <-preparing:
		t.Fatalf("the prepare returned (%v) without giving GPU %s its default back", err, gpus[0])
	case <-time.After(stuckGuard):
		t.Fatal("the rollback never ran nvidia-smi")
	}
	if got := n.timeSlices.interval(gpus[0]); got != api.IntervalLong {
		t.Fatalf("GPU %s time-slice %s before the rollback's nvidia-smi, want Long", gpus[0], got)
	}
	if err := await(t, "the prepare of a claim on another GPU, while a rollback waited for nvidia-smi,", prepareAsync(context.Background(), d, other)); err != nil {
		t.Fatalf("prepare of a claim on another GPU: %v", err)
	}
	gate()
	if err := await(t, "the prepare rolled back", preparing); err == nil || !strings.Contains(err.Error(), "GPU is busy") || !strings.Contains(err.Error(), gpus[1]) {
		t.Fatalf("prepare whose GPU %s refused its interval: %v, want nvidia-smi's error naming the GPU", gpus[1], err)
	}
	for _, gpu := range gpus {
		if got := n.timeSlices.interval(gpu); got != api.IntervalDefault {
			t.Errorf("GPU %s time-slice %s after the rollback, want Default", gpu, got)
		}
	}
	if n.spec(claim) != nil {
		t.Error("the rolled-back claim kept its CDI spec")
	}
	if got := checkpointed(t, n); len(got) != 1 || got[other.UID] != prepared.PrepareCompleted {
		t.Errorf("checkpoint holds %v, want the other claim alone", got)
	}
}

// The background repair of a claim whose time-slice could not be set at start-up runs
// nvidia-smi without holding up the node's other claims.
func TestARepairWaitingForNvidiaSMIHoldsUpNoOtherClaim(t *testing.T) {
	var gate *gatedTimeSlicer
	n := newNode(t, "dgx-h100", gateTimeSlices(&gate), func(c *plugin.Config) { c.RepairBackoff = 10 * time.Millisecond })
	gate.gpu = n.backendGPU(2)
	c, other := n.allocate(gpuClaim("2", timeSlicing("Long"))), n.allocate(gpuClaim("3", ""))
	mustPrepare(t, n.newDriver(nil), c)
	n.timeSlices.mu.Lock()
	n.timeSlices.intervals[gate.gpu] = api.IntervalDefault // a GPU reset forgets it
	n.timeSlices.mu.Unlock()
	gate.failWith(errors.New("nvidia-smi: Unable to determine the device handle"))
	d := n.newDriver(nil)
	t.Cleanup(d.Stop)
	gate.shut()
	defer gate.open()
	gate.failWith(nil)
	if iv := gate.awaitEntered(t, "the repair"); iv != api.IntervalLong {
		t.Fatalf("the repair set GPU 2 to %s, want Long", iv)
	}
	if err := await(t, "the prepare of a claim on another GPU, while a repair waited for nvidia-smi,", prepareAsync(context.Background(), d, other)); err != nil {
		t.Fatalf("prepare of a claim on another GPU: %v", err)
	}
	if err := await(t, "the unprepare of a claim on another GPU, while a repair waited for nvidia-smi,", unprepareAsync(context.Background(), d, other)); err != nil {
		t.Fatalf("unprepare of a claim on another GPU: %v", err)
	}
	gate.open()
	waitFor(t, func() bool { return n.timeSlices.interval(gate.gpu) == api.IntervalLong })
	if err := unprepare(t, d, c); err != nil {
		t.Fatal(err)
	}
	assertClean(t, n, c)
}

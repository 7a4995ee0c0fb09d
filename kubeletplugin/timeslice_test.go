package kubeletplugin_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
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
		if err := smi.SetTimeSlice("GPU-1234", iv); err != nil {
			t.Fatal(err)
		}
	}
	raw, _ := os.ReadFile(args)
	if want := "compute-policy -i GPU-1234 --set-timeslice=3\ncompute-policy -i GPU-1234 --set-timeslice=0\n"; string(raw) != want {
		t.Errorf("nvidia-smi called with %q, want %q", raw, want)
	}
	missing := plugin.NvidiaSMI{Binary: filepath.Join(dir, "no-such-smi")}
	if err := missing.SetTimeSlice("GPU-1234", api.IntervalShort); err == nil || !strings.Contains(err.Error(), missing.Binary) {
		t.Errorf("missing nvidia-smi: %v, want an error naming %s", err, missing.Binary)
	}
}

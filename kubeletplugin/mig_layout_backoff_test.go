package kubeletplugin_test

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	testingclock "k8s.io/utils/clock/testing"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/driver"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

// TestFailedMIGLayoutIsRetriedWithBackoff: a layout that fails on a GPU (and is rolled back)
// is not tried again on every pass: it waits one interval, then twice as long each time it
// fails again, and a changed label is tried at once.
func TestFailedMIGLayoutIsRetriedWithBackoff(t *testing.T) {
	n := newNode(t, "dgx-h100", func(c *plugin.Config) { c.Render.MIG = driver.MIGStatic })
	var tries atomic.Int64 // passes that reached GPU 3
	dev := n.backend.NVML.(*server.Server).Devices[3].(*server.Device)
	dev.CreateGpuInstanceWithPlacementFunc = func(*nvml.GpuInstanceProfileInfo, *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
		tries.Add(1)
		return nil, nvml.ERROR_UNKNOWN
	}
	file := filepath.Join(t.TempDir(), "mig-layouts.yaml")
	if err := os.WriteFile(file, []byte(testMIGLayouts), 0o644); err != nil {
		t.Fatal(err)
	}
	interval := 10 * time.Millisecond
	clk := testingclock.NewFakePassiveClock(time.Now())
	c := startOnCluster(t, n, func(cfg *plugin.Config) {
		cfg.MIGLayoutsFile = file
		cfg.MIGLayoutInterval = interval
		cfg.Clock = clk
	})
	c.label(api.LabelMIGConfig, "all-1g.10gb")
	c.waitForState(api.MIGConfigFailed)
	// waitTries waits for the count of tries to reach want, then checks that it stays there
	// over many passes of the loop (a pass every 10 ms of real time).
	waitTries := func(want int64, what string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); tries.Load() < want && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		}
		time.Sleep(30 * interval)
		if got := tries.Load(); got != want {
			t.Fatalf("%s: the layout was tried %d times, want %d", what, got, want)
		}
	}
	waitTries(1, "before its first wait")
	clk.SetTime(clk.Now().Add(interval)) // the first wait is one interval
	waitTries(2, "after one interval")
	clk.SetTime(clk.Now().Add(interval)) // the second wait is two
	waitTries(2, "one interval into the second wait")
	clk.SetTime(clk.Now().Add(interval))
	waitTries(3, "after two intervals")
	// Another layout is tried at once, whatever the wait of the one before.
	c.label(api.LabelMIGConfig, "all-balanced")
	waitTries(4, "a new label")
}

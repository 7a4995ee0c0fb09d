package kubeletplugin_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/driver/nvmlsim"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

// A Low HAMi-core share counts the time a busy High share of its GPU holds it back; an
// MPS share, which no other claim's priority holds back, has no such count.
func TestLowShareCountsTheTimeAHighShareHoldsItBack(t *testing.T) {
	u := newUsageNode(t)
	u.cfg.VGPULibrary = "/opt/hami/libvgpu.so"
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	u.cfg.Usage.Now = func() time.Time { return now }
	d := u.newDriver(nil)
	cfg := func(limits string) string {
		return "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nlimits: " + limits
	}
	high := u.allocate(shareClaim("8Gi", "30", cfg("{policy: Guaranteed, priority: High}")))
	low := u.allocate(shareClaim("4Gi", "0", cfg("{policy: BestEffort, computeLimit: 50}")))
	mps := u.allocate(shareClaim("4Gi", "0", cfg("{enforcement: MPS, policy: BestEffort}")))
	gpu := gpuOf(t, high)
	if gpuOf(t, low) != gpu || gpuOf(t, mps) != gpu {
		t.Fatalf("shares on GPUs %s, %s, %s: the test needs them on one", gpu, gpuOf(t, low), gpuOf(t, mps))
	}
	idx, _ := strconv.Atoi(gpu)
	pods := map[int]types.UID{100: "00000000-0000-0000-0000-000000000100", 200: "00000000-0000-0000-0000-000000000200", 300: "00000000-0000-0000-0000-000000000300"}
	mustPrepare(t, d, high)
	mustPrepare(t, d, low)
	mustPrepare(t, d, mps)
	u.runPod(t, high, "inference", pods[100])
	u.runPod(t, low, "batch", pods[200])
	u.runPod(t, mps, "notebook", pods[300])
	for pid, pod := range pods {
		u.process(t, pid, pod)
	}

	url := serveMetrics(t, d)
	heldBack := func(name string) string {
		t.Helper()
		prefix := `gpudra_plugin_claim_held_back_seconds_total{claim="` + name + `",gpu="` + gpu + `",namespace="default"} `
		for _, l := range strings.Split(scrape(t, url), "\n") {
			if v, ok := strings.CutPrefix(l, prefix); ok {
				return v
			}
		}
		return "absent"
	}
	// at sets the GPU's processes at the given second and samples them.
	at := func(second int, highSM uint32) {
		t.Helper()
		now = time.Date(2026, 1, 2, 3, 4, 5+second, 0, time.UTC)
		if err := nvmlsim.SetProcesses(u.backend.NVML, idx, []nvmlsim.Process{
			{PID: 100, UsedMemoryBytes: 6 << 30, SMUtil: highSM},
			{PID: 200, UsedMemoryBytes: 1 << 30, SMUtil: 10},
			{PID: 300, UsedMemoryBytes: 1 << 30, SMUtil: 5},
		}); err != nil {
			t.Fatal(err)
		}
		plugin.ExpireUsageSample(d)
	}
	steps := []struct {
		second int
		highSM uint32
		want   string
	}{
		{0, 40, "0"},   // the first sample that sees it held back
		{20, 40, "20"}, // held back in both samples: 20 s
		{50, 0, "20"},  // the High share went idle: not counted
		{60, 35, "20"}, // busy again: counted from the next sample on
		{75, 35, "35"},
	}
	for _, s := range steps {
		at(s.second, s.highSM)
		if got := heldBack(low.Name); got != s.want {
			t.Errorf("at %d s (High share at SM %d%%): the Low share was held back %s s, want %s", s.second, s.highSM, got, s.want)
		}
		for _, c := range []string{high.Name, mps.Name} {
			if got := heldBack(c); got != "absent" {
				t.Errorf("at %d s: claim %s has a held-back count %s; only Low HAMi-core shares have one", s.second, c, got)
			}
		}
	}

	plugin.WriteClaimStatus(context.Background(), d)
	c, err := u.client.ResourceV1().ResourceClaims("default").Get(context.Background(), low.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var du plugin.DeviceUsage
	if len(c.Status.Devices) != 1 || json.Unmarshal(c.Status.Devices[0].Data.Raw, &du) != nil || du.Usage.HeldBackSeconds == nil || *du.Usage.HeldBackSeconds != 35 {
		t.Errorf("the Low share's status.devices: %+v, want heldBackSeconds 35", c.Status.Devices)
	}
}

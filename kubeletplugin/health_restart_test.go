package kubeletplugin_test

import (
	"os"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpudra/gpudra/driver/nvmlsim"
	"github.com/gpudra/gpudra/driver/simulated"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

func TestHealthTaintsAcrossRestarts(t *testing.T) {
	tests := []struct {
		name   string
		event  nvmlsim.Event
		reboot bool
		// kept is the taint GPU 2's devices still carry after the restart ("": none).
		kept   string
		effect resourceapi.DeviceTaintEffect
	}{
		{"XID 79 stays", nvmlsim.XID(79), false, "xid-79", resourceapi.DeviceTaintEffectNoExecute},
		{"an NVLink XID stays", nvmlsim.XID(74), false, "xid-74", resourceapi.DeviceTaintEffectNoSchedule},
		{"double-bit ECC stays", nvmlsim.DoubleBitECC, false, "double-bit-ecc", resourceapi.DeviceTaintEffectNoExecute},
		{"a reboot clears XID 79 of a GPU NVML reads", nvmlsim.XID(79), true, "", ""},
		{"a lost GPU's taint clears on GPUs NVML reads", nvmlsim.GPULost, false, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each on a node and a cluster of its own
			n := newNode(t, "dgx-h100")
			c := startOnCluster(t, n)
			inject(t, n, 2, tc.event)
			before := c.waitForSlices(allTainted(2, 1))["gpu-2"].Taints[0]
			c.d.Stop()
			if tc.reboot {
				if err := os.WriteFile(n.cfg.BootIDPath, []byte("boot-2\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}

			c = startOnCluster(t, n)
			devs := c.waitForSlices(func(map[string]resourceapi.Device) bool { return true })
			health := healthOf(<-watchHealth(t, c.d))
			for name, d := range devs {
				want := tc.kept != "" && usesGPU(d, 2)
				if !want {
					if len(d.Taints) > 0 {
						t.Errorf("%s: taints %+v after the restart, want none", name, d.Taints)
					}
					continue
				}
				if len(d.Taints) != 1 || d.Taints[0].Value != tc.kept || d.Taints[0].Effect != tc.effect || !d.Taints[0].TimeAdded.Equal(before.TimeAdded) {
					t.Errorf("%s: taints %+v after the restart, want %s:%s added at %v, as before", name, d.Taints, tc.kept, tc.effect, before.TimeAdded)
				}
				if h := health[name]; h.Health != kubeletplugin.HealthStatusUnhealthy {
					t.Errorf("%s: reported %s (%s) after the restart, want Unhealthy", name, h.Health, h.Message)
				}
			}
			if tc.kept == "" {
				c.waitForEvent(plugin.ReasonGPUHealthy, "GPU 2", before.Value)
			} else {
				waitForMetric(t, c.d, `gpudra_plugin_unhealthy_gpus 1`)
			}
		})
	}
}

func TestRollingUpdatePluginsPublishTheSameTaints(t *testing.T) {
	// The old and the new plugin of a rolling update are two processes: each has its own
	// NVML (here: its own simulated server of the same node), one checkpoint directory.
	n := newNode(t, "dgx-h100")
	old := startOnCluster(t, n)
	b, err := simulated.Open("dgx-h100", nodeName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	n2 := *n
	n2.backend, n2.cfg.Backend = b, b
	next := startOnCluster(t, &n2, func(cfg *plugin.Config) { cfg.RollingUpdatePodUID = "new-pod-uid" })

	// Only the old plugin's NVML reports the fault; the new one learns it from the GPU
	// health file.
	inject(t, n, 2, nvmlsim.XID(79))
	oldDevs := old.waitForSlices(allTainted(2, 1))
	newDevs := next.waitForSlices(allTainted(2, 1))
	for name, want := range oldDevs {
		got := newDevs[name]
		if len(got.Taints) != len(want.Taints) {
			t.Errorf("%s: the new plugin publishes taints %+v, the old one %+v", name, got.Taints, want.Taints)
			continue
		}
		for k := range want.Taints {
			w, g := want.Taints[k], got.Taints[k]
			if g.Key != w.Key || g.Value != w.Value || g.Effect != w.Effect || !g.TimeAdded.Equal(w.TimeAdded) {
				t.Errorf("%s: the new plugin publishes taint %+v, the old one %+v", name, g, w)
			}
		}
	}
	select {
	case r := <-watchHealth(t, next.d):
		if h := healthOf(r)["gpu-2"]; h.Health != kubeletplugin.HealthStatusUnhealthy {
			t.Errorf("the new plugin reports gpu-2 %s, want Unhealthy", h.Health)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no health report from the new plugin")
	}
}

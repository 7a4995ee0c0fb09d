package kubeletplugin_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/nvmlsim"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

// loseGPU makes the node's simulated GPU fall off the bus as NVML sees it: reading it
// returns ERROR_GPU_IS_LOST.
func loseGPU(t *testing.T, n *node, gpu int) {
	t.Helper()
	d := n.backend.NVML.(*server.Server).Devices[gpu].(*server.Device)
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
}

// waitForEvent waits for an Event on the node with the given reason whose message
// contains every one of want, and returns its message.
func (c *cluster) waitForEvent(reason string, want ...string) string {
	c.t.Helper()
	var notes []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		list, err := c.client.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			c.t.Fatal(err)
		}
		notes = notes[:0]
		for _, e := range list.Items {
			if e.Reason != reason || e.InvolvedObject.Kind != "Node" || e.InvolvedObject.Name != nodeName || e.InvolvedObject.UID != "node-a-uid" {
				continue
			}
			notes = append(notes, e.Message)
			if containsAll(e.Message, want...) {
				return e.Message
			}
		}
	}
	c.t.Fatalf("no %s Event on Node %s naming %q; %s Events: %q", reason, nodeName, want, reason, notes)
	return ""
}

func containsAll(s string, want ...string) bool {
	for _, w := range want {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

func TestLostGPUAtStartUpLeavesTheOthersServing(t *testing.T) {
	tests := []struct {
		name       string
		lose       func(t *testing.T, n *node)
		call, code string
	}{
		{"its memory cannot be read", func(t *testing.T, n *node) { loseGPU(t, n, 3) }, "GetMemoryInfo", "ERROR_GPU_IS_LOST"},
		{"its handle cannot be got", func(t *testing.T, n *node) {
			s := n.backend.NVML.(*server.Server)
			get := s.DeviceGetHandleByIndexFunc
			s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
				if i == 3 {
					return nil, nvml.ERROR_UNKNOWN
				}
				return get(i)
			}
		}, "DeviceGetHandleByIndex", "ERROR_UNKNOWN"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, "dgx-h100")
			// Allocated before the GPU was lost (the scheduler's view of the old slices).
			onLost, onHealthy := n.allocate(gpuClaim("3", "")), n.allocate(gpuClaim("2", ""))
			tc.lose(t, n)
			c := startOnCluster(t, n)
			devs := c.waitForSlices(func(map[string]resourceapi.Device) bool { return true })
			for name, d := range devs {
				if usesGPU(d, 3) {
					t.Errorf("%s of the lost GPU 3 is published", name)
				}
			}
			for gpu := range 8 {
				if _, ok := devs[driver.GPUDeviceName(gpu)]; ok != (gpu != 3) {
					t.Errorf("%s published: %v, want %v", driver.GPUDeviceName(gpu), ok, gpu != 3)
				}
			}
			mustPrepare(t, c.d, onHealthy)
			if _, err := prepare(t, c.d, onLost); err == nil || !strings.Contains(err.Error(), "gpu-3") {
				t.Errorf("preparing a claim of the lost GPU: %v, want an error naming gpu-3", err)
			}
			if err := unprepare(t, c.d, onHealthy); err != nil {
				t.Errorf("unpreparing a claim of a healthy GPU: %v", err)
			}
			waitForMetric(t, c.d, fmt.Sprintf(`gpudra_plugin_unreadable_gpus{call=%q,gpu="3",return=%q} 1`, tc.call, tc.code))
			c.waitForEvent(plugin.ReasonGPUUnreadable, "GPU 3", tc.call, tc.code)
		})
	}
}

func TestNodeErrorsStillFailStartUp(t *testing.T) {
	n := newNode(t, "dgx-h100")
	n.backend.NVML.(*server.Server).DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_DRIVER_NOT_LOADED }
	_, err := plugin.New(context.Background(), n.cfg)
	if err == nil || !containsAll(err.Error(), "discovering GPUs", "DeviceGetCount", "ERROR_DRIVER_NOT_LOADED") {
		t.Errorf("got %v, want an error naming DeviceGetCount and ERROR_DRIVER_NOT_LOADED", err)
	}
}

func TestGPULostDuringARunTaintsOnlyIt(t *testing.T) {
	n := newNode(t, "dgx-h100")
	c := startOnCluster(t, n)
	loseGPU(t, n, 2)
	inject(t, n, 2, nvmlsim.GPULost)
	devs := c.waitForSlices(allTainted(2, 1))
	for name, d := range devs {
		switch {
		case usesGPU(d, 2):
			if len(d.Taints) != 1 || d.Taints[0].Value != "gpu-lost" || d.Taints[0].Effect != resourceapi.DeviceTaintEffectNoExecute {
				t.Errorf("%s of the lost GPU: taints %+v, want gpu-lost:NoExecute", name, d.Taints)
			}
		case len(d.Taints) > 0:
			t.Errorf("%s does not use the lost GPU 2 but is tainted: %+v", name, d.Taints)
		}
	}
	c.waitForEvent(plugin.ReasonGPUUnhealthy, "GPU 2", "gpu-lost")
	mustPrepare(t, c.d, n.allocate(gpuClaim("5", "")))

	// The plugin restarts: its discovery cannot read GPU 2 and leaves it out.
	c.d.Stop()
	c = startOnCluster(t, n)
	devs = c.waitForSlices(func(map[string]resourceapi.Device) bool { return true })
	for name, d := range devs {
		if usesGPU(d, 2) {
			t.Errorf("after a restart, %s of the lost GPU 2 is published", name)
		}
		if len(d.Taints) > 0 {
			t.Errorf("after a restart, %s is tainted: %+v", name, d.Taints)
		}
	}
	waitForMetric(t, c.d, `gpudra_plugin_unreadable_gpus{call="GetMemoryInfo",gpu="2",return="ERROR_GPU_IS_LOST"} 1`)
}

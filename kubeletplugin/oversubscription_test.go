package kubeletplugin_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gpudra/gpudra/driver"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

const vgpuLibrary = "/opt/hami/libvgpu.so"

// oversubscribedNode is a dgx-h100 node whose shares offer factor × each card's memory.
func oversubscribedNode(t *testing.T, factor float64, vgpu string) *node {
	t.Helper()
	return newNode(t, "dgx-h100", func(c *plugin.Config) {
		c.Render = driver.RenderOptions{MIG: driver.MIGDynamic, MemoryOversubscription: factor}
		c.VGPULibrary = vgpu
	})
}

func shareConfig(fields string) string {
	return "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\n" + fields
}

func TestHAMiSharesOnAnOversubscribedNodeGetVirtualDeviceMemory(t *testing.T) {
	for name, config := range map[string]string{
		"Auto (the default)": "",
		"HAMi":               shareConfig("limits: {enforcement: HAMi}"),
		"HAMi, a tier":       shareConfig("limits: {enforcement: HAMi, policy: Guaranteed, computeLimit: 60}"),
	} {
		t.Run(name, func(t *testing.T) {
			n := oversubscribedNode(t, 1.5, vgpuLibrary)
			d := n.newDriver(nil)
			// Three 39Gi shares: more than the card's 80 GB, within 1.5 times it.
			var device string
			for k := range 3 {
				c := n.allocate(shareClaim("39Gi", "20", config))
				if got := c.Status.Allocation.Devices.Results[0].Device; k == 0 {
					device = got
				} else if got != device {
					t.Fatalf("share %d allocated on %s, the others on %s", k+1, got, device)
				}
				mustPrepare(t, d, c)
				got := env(n.spec(c).Devices[0].ContainerEdits)
				for k, v := range map[string]string{"CUDA_OVERSUBSCRIBE": "true", "CUDA_DEVICE_MEMORY_LIMIT_0": fmt.Sprintf("%dm", 39<<10)} {
					if got[k] != v {
						t.Errorf("%s=%q, want %q (env %v)", k, got[k], v, got)
					}
				}
			}
		})
	}
}

func TestOversubscriptionSurvivesAPluginRestart(t *testing.T) {
	n := oversubscribedNode(t, 2, vgpuLibrary)
	c := n.allocate(shareClaim("8Gi", "10", ""))
	mustPrepare(t, n.newDriver(nil), c)
	// A new plugin writes the missing spec again from its checkpoint.
	if err := os.Remove(n.specPath(c.UID)); err != nil {
		t.Fatal(err)
	}
	mustPrepare(t, n.newDriver(nil), c)
	if n.spec(c) == nil {
		t.Fatal("the restarted plugin wrote no CDI spec")
	}
	if got := env(n.spec(c).Devices[0].ContainerEdits)["CUDA_OVERSUBSCRIBE"]; got != "true" {
		t.Errorf("after a restart CUDA_OVERSUBSCRIBE=%q, want true", got)
	}
}

func TestSharesWithoutOversubscriptionGetNoVirtualDeviceMemory(t *testing.T) {
	for _, factor := range []float64{0, 1} {
		n := oversubscribedNode(t, factor, vgpuLibrary)
		c := n.allocate(shareClaim("8Gi", "10", shareConfig("limits: {enforcement: HAMi}")))
		mustPrepare(t, n.newDriver(nil), c)
		got := env(n.spec(c).Devices[0].ContainerEdits)
		if v, ok := got["CUDA_OVERSUBSCRIBE"]; ok {
			t.Errorf("factor %v: CUDA_OVERSUBSCRIBE=%s", factor, v)
		}
		if got["CUDA_DEVICE_MEMORY_LIMIT_0"] != "8192m" {
			t.Errorf("factor %v: CUDA_DEVICE_MEMORY_LIMIT_0=%q, want 8192m", factor, got["CUDA_DEVICE_MEMORY_LIMIT_0"])
		}
	}
}

func TestMPSSharesAreRefusedOnAnOversubscribedNode(t *testing.T) {
	tests := []struct {
		name, vgpu, config string
		want               []string
	}{
		{"MPS enforcement", vgpuLibrary, shareConfig("limits: {enforcement: MPS}"),
			[]string{"limits.enforcement", `"MPS"`, "1.5", "--memory-oversubscription", "use HAMi or Auto", "--vgpu-library", "without memory oversubscription"}},
		{"MPS enforcement, no libvgpu.so", "", shareConfig("limits: {enforcement: MPS}"),
			[]string{"limits.enforcement", "1.5", "use HAMi or Auto"}},
		{"Auto without libvgpu.so", "", "",
			[]string{"limits.enforcement", `"Auto"`, "1.5", "--memory-oversubscription", "libvgpu.so", "without memory oversubscription"}},
		{"HAMi with MPS sharing", vgpuLibrary, shareConfig("limits: {enforcement: HAMi}\nsharing: {strategy: MPS}"),
			[]string{"sharing.strategy", "1.5", "TimeSlicing"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := oversubscribedNode(t, 1.5, tc.vgpu)
			c := n.allocate(shareClaim("8Gi", "10", tc.config))
			_, err := prepare(t, n.newDriver(nil), c)
			if err == nil {
				t.Fatal("prepared, want a refusal")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("prepare error %q does not say %q", err, w)
				}
			}
			if n.spec(c) != nil {
				t.Error("a CDI spec was written for the refused claim")
			}
		})
	}
	t.Run("MPS on a node without oversubscription", func(t *testing.T) {
		n := oversubscribedNode(t, 1, "")
		mustPrepare(t, n.newDriver(nil), n.allocate(shareClaim("8Gi", "10", shareConfig("limits: {enforcement: MPS}"))))
	})
}

package cdi_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpudra/gpudra/cdi"
)

// A claim of AMD GPUs gets /dev/kfd and each GPU's render and card nodes, nothing of
// NVIDIA's (an AMD node has no /dev/nvidiactl, and a device file that is missing fails the
// container), and ROCR_VISIBLE_DEVICES with the GPUs' UUIDs; a compute partition's UUID is
// not one ROCm knows, so a claim with one gets no ROCR_VISIBLE_DEVICES.
func TestAMDGPUSpecHasKFDAndDRMNodes(t *testing.T) {
	amd := func(index, render, card int, rocm bool) cdi.GPU {
		return cdi.GPU{Index: index, UUID: "GPU-" + strings.Repeat(string(rune('a'+index)), 16),
			AMD: &cdi.AMDNodes{RenderMinor: render, Card: card, ROCmUUID: rocm}}
	}
	dev := func(g cdi.GPU) cdi.Device {
		return cdi.Device{Name: claimUID + "-gpu", Device: "gpu", GPUs: []cdi.GPU{g}, MemoryBytes: 192 << 30, ComputePercent: 100}
	}
	root := t.TempDir()
	two := []cdi.Device{dev(amd(4, 132, 4, true)), dev(amd(5, 133, 5, true))}
	two[1].Name += "-2"
	cache, ids, _ := written(t, cdi.Node{DriverRoot: root}, two...)
	e := edits(t, cache, ids[0])
	want := []string{filepath.Join(root, "dev/kfd"), filepath.Join(root, "dev/dri/renderD132"), filepath.Join(root, "dev/dri/card4")}
	if got := hostPaths(e.DeviceNodes); !slices.Equal(got, want) {
		t.Errorf("device nodes %v, want %v", got, want)
	}
	for _, id := range ids {
		if e := edits(t, cache, id); !hasEnv(e, "ROCR_VISIBLE_DEVICES=GPU-eeeeeeeeeeeeeeee,GPU-ffffffffffffffff") {
			t.Errorf("%s: env %v lacks ROCR_VISIBLE_DEVICES with both GPUs' UUIDs, in order", id, e.Env)
		}
	}
	spec := cache.GetDevice(ids[0]).GetSpec()
	for _, n := range spec.ContainerEdits.DeviceNodes {
		if strings.Contains(n.Path, "nvidia") {
			t.Errorf("an AMD claim's spec has NVIDIA's %s", n.Path)
		}
	}

	cache, ids, _ = written(t, cdi.Node{DriverRoot: root}, dev(amd(0, 128, -1, false)))
	e = edits(t, cache, ids[0])
	if got := hostPaths(e.DeviceNodes); !slices.Equal(got, []string{filepath.Join(root, "dev/kfd"), filepath.Join(root, "dev/dri/renderD128")}) {
		t.Errorf("a partition without a card: device nodes %v", got)
	}
	for _, kv := range e.Env {
		if strings.HasPrefix(kv, "ROCR_VISIBLE_DEVICES=") {
			t.Errorf("a partition's claim sets %s", kv)
		}
	}
}

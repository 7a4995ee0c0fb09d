package cdi_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gpudra/gpudra/cdi"
)

func hamiShare(gpu cdi.GPU, memoryMiB int64, compute int) cdi.Device {
	return cdi.Device{
		Name: fmt.Sprintf("%s-gpu-%d-share-%d-%d", claimUID, gpu.Index, memoryMiB, compute), Device: fmt.Sprintf("gpu-%d-share", gpu.Index),
		GPUs: []cdi.GPU{gpu}, MemoryBytes: memoryMiB << 20, ComputePercent: compute,
		Limits:      &cdi.Limits{MemoryMiB: memoryMiB, ComputePercent: compute, HAMi: true},
		PreloadFile: "/var/lib/gpudra/vgpu-preload/" + claimUID,
	}
}

// HAMi-core reads a cap per CUDA index; a container given several GPUs of a claim gets
// a cap on every GPU that a share is on, numbered as CUDA numbers them (PCI bus order).
func TestHAMiLimitsCoverEveryGPUOfTheContainer(t *testing.T) {
	whole0 := cdi.Device{Name: claimUID + "-gpu-0", Device: "gpu-0", GPUs: []cdi.GPU{gpu0}, MemoryBytes: 80 << 30, ComputePercent: 100}
	tests := []struct {
		name   string
		devs   []cdi.Device
		want   map[string]string
		absent []string
	}{
		{
			name:   "two shares of one claim cap both GPUs",
			devs:   []cdi.Device{hamiShare(gpu0, 2048, 20), hamiShare(gpu3, 10240, 50)},
			want:   map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "2048m", "CUDA_DEVICE_SM_LIMIT_0": "20", "CUDA_DEVICE_MEMORY_LIMIT_1": "10240m", "CUDA_DEVICE_SM_LIMIT_1": "50"},
			absent: []string{"CUDA_DEVICE_SM_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT"},
		},
		{
			name: "results out of PCI bus order are numbered in PCI bus order",
			devs: []cdi.Device{hamiShare(gpu3, 10240, 50), hamiShare(gpu0, 2048, 20)},
			want: map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "2048m", "CUDA_DEVICE_SM_LIMIT_0": "20", "CUDA_DEVICE_MEMORY_LIMIT_1": "10240m", "CUDA_DEVICE_SM_LIMIT_1": "50"},
		},
		{
			name:   "a whole GPU beside a share stays uncapped",
			devs:   []cdi.Device{hamiShare(gpu3, 4096, 30), whole0},
			want:   map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_1": "4096m", "CUDA_DEVICE_SM_LIMIT_1": "30"},
			absent: []string{"CUDA_DEVICE_MEMORY_LIMIT_0", "CUDA_DEVICE_SM_LIMIT_0", "CUDA_DEVICE_SM_LIMIT"},
		},
		{
			name: "two shares of one GPU add up",
			devs: []cdi.Device{hamiShare(gpu3, 2048, 20), hamiShare(gpu3, 3072, 30)},
			want: map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "5120m", "CUDA_DEVICE_SM_LIMIT_0": "50"},
		},
		{
			name:   "a share without an SM cap leaves its GPU's SMs uncapped",
			devs:   []cdi.Device{hamiShare(gpu3, 2048, 20), hamiShare(gpu3, 3072, 0)},
			want:   map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "5120m"},
			absent: []string{"CUDA_DEVICE_SM_LIMIT_0"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cache, ids, _ := written(t, cdi.Node{DriverRoot: t.TempDir(), VGPULibrary: "/opt/hami/libvgpu.so"}, tc.devs...)
			env := containerEnv(t, cache, ids...)
			for k, v := range tc.want {
				if env[k] != v {
					t.Errorf("the container's %s=%q, want %q", k, env[k], v)
				}
			}
			for _, k := range append(tc.absent, "LD_PRELOAD") {
				if v, ok := env[k]; ok {
					t.Errorf("the container has %s=%q", k, v)
				}
			}
			if env["CUDA_DEVICE_ORDER"] != "PCI_BUS_ID" {
				t.Errorf("CUDA_DEVICE_ORDER=%q, want PCI_BUS_ID (HAMi-core's caps are numbered in PCI bus order)", env["CUDA_DEVICE_ORDER"])
			}
		})
	}
}

// A process that clears its environment still loads HAMi-core: it comes from the
// loader's /etc/ld.so.preload, a read-only mount of the claim's preload file, not from
// LD_PRELOAD. (Its caps still come from the environment.)
func TestHAMiIsPreloadedByAReadOnlyFileNotTheEnvironment(t *testing.T) {
	d := hamiShare(gpu0, 2048, 20)
	d.CacheDir = t.TempDir()
	d.PreloadFile = filepath.Join(t.TempDir(), "preload")
	cache, ids, _ := written(t, cdi.Node{DriverRoot: t.TempDir(), VGPULibrary: "/opt/hami/libvgpu.so"}, d)
	if env := containerEnv(t, cache, ids...); env["LD_PRELOAD"] != "" {
		t.Errorf("LD_PRELOAD=%q in the container's environment", env["LD_PRELOAD"])
	}
	mounts := containerMounts(t, cache, ids...)
	var found bool
	for _, m := range mounts {
		switch m.Destination {
		case cdi.VGPUPreloadPath:
			found = true
			if m.Source != d.PreloadFile || !slices.Contains(m.Options, "ro") {
				t.Errorf("%s mounts %s with %v, want %s read-only", cdi.VGPUPreloadPath, m.Source, m.Options, d.PreloadFile)
			}
		case cdi.VGPULibraryPath:
			if !slices.Contains(m.Options, "ro") {
				t.Errorf("%s is mounted with %v, want read-only", cdi.VGPULibraryPath, m.Options)
			}
		}
	}
	if !found {
		t.Errorf("no mount at %s in %v", cdi.VGPUPreloadPath, mounts)
	}
	if cdi.VGPUPreload != cdi.VGPULibraryPath+"\n" {
		t.Errorf("preload file content %q, want the mounted library's path %q", cdi.VGPUPreload, cdi.VGPULibraryPath)
	}
}

// Each HAMi-core device caps its own GPU: at the CUDA index decided for it at prepare when
// there is one, and never under an index that is another GPU's in a container given only
// some of the claim's devices.
func TestHAMiCapsAreEachDevicesOwn(t *testing.T) {
	at := func(d cdi.Device, index int) cdi.Device {
		d.Limits.CUDAIndex = &index
		return d
	}
	tests := []struct {
		name   string
		devs   []cdi.Device
		given  []int // the devices the container gets
		want   map[string]string
		absent []string
	}{
		{name: "a decided index replaces the place among the claim's devices",
			devs: []cdi.Device{at(hamiShare(gpu3, 4096, 30), 2)}, given: []int{0},
			want: map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_2": "4096m", "CUDA_DEVICE_SM_LIMIT_2": "30"}, absent: []string{"CUDA_DEVICE_MEMORY_LIMIT_0"}},
		{name: "a container given one share gets no cap of the claim's other GPU",
			devs: []cdi.Device{hamiShare(gpu0, 2048, 20), hamiShare(gpu3, 4096, 30)}, given: []int{1},
			want: map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_1": "4096m"}, absent: []string{"CUDA_DEVICE_MEMORY_LIMIT_0", "CUDA_DEVICE_SM_LIMIT_0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cache, ids, _ := written(t, cdi.Node{DriverRoot: t.TempDir(), VGPULibrary: "/opt/hami/libvgpu.so"}, tc.devs...)
			var given []string
			for _, k := range tc.given {
				given = append(given, ids[k])
			}
			env := containerEnv(t, cache, given...)
			for k, v := range tc.want {
				if env[k] != v {
					t.Errorf("the container's %s=%q, want %q", k, env[k], v)
				}
			}
			for _, k := range tc.absent {
				if v, ok := env[k]; ok {
					t.Errorf("the container has %s=%q", k, v)
				}
			}
		})
	}
}

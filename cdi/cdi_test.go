package cdi_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/cdi"
)

const claimUID = "0b7c1f2e-uid"

var (
	gpu0 = cdi.GPU{Index: 0, Minor: 0, UUID: "GPU-aaaa"}
	gpu3 = cdi.GPU{Index: 3, Minor: 3, UUID: "GPU-dddd"}
)

// written writes devs for one claim, reads the spec back through the CDI library (as a
// runtime would) and returns it.
func written(t *testing.T, node cdi.Node, devs ...cdi.Device) (*cdiapi.Cache, []string, string) {
	t.Helper()
	dir := t.TempDir()
	specs, err := cdi.NewSpecs(dir)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := specs.Write(claimUID, node, devs, []byte(`{"state":"PrepareCompleted"}`))
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(specs.Path(claimUID))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("spec mode %v, want 0600", info.Mode().Perm())
	}
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if cache.GetDevice(id) == nil {
			t.Fatalf("runtime cannot resolve %s; errors: %v", id, cache.GetErrors())
		}
	}
	return cache, ids, dir
}

func edits(t *testing.T, cache *cdiapi.Cache, id string) cdispec.ContainerEdits {
	t.Helper()
	return cache.GetDevice(id).ContainerEdits
}

func hasEnv(e cdispec.ContainerEdits, kv string) bool { return slices.Contains(e.Env, kv) }

func hostPaths(nodes []*cdispec.DeviceNode) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.HostPath)
	}
	return out
}

func TestWholeGPUSpecHasItsDeviceNodeAndUUID(t *testing.T) {
	root := t.TempDir()
	cache, ids, _ := written(t, cdi.Node{DriverRoot: root}, cdi.Device{
		Name: claimUID + "-gpu-3", Device: "gpu-3", GPUs: []cdi.GPU{gpu3}, MemoryBytes: 80 << 30, ComputePercent: 100,
	})
	if want := "gpudra.dev/gpu=" + claimUID + "-gpu-3"; ids[0] != want {
		t.Errorf("id %s, want %s", ids[0], want)
	}
	e := edits(t, cache, ids[0])
	if got := hostPaths(e.DeviceNodes); !slices.Equal(got, []string{filepath.Join(root, "dev/nvidia3")}) || e.DeviceNodes[0].Path != "/dev/nvidia3" {
		t.Errorf("device nodes %v", got)
	}
	for _, kv := range []string{"NVIDIA_VISIBLE_DEVICES=GPU-dddd", "GPUDRA_DEVICES=gpu-3", "GPUDRA_MEMORY_MIB_0=81920", "GPUDRA_COMPUTE_PERCENT_0=100"} {
		if !hasEnv(e, kv) {
			t.Errorf("env %v lacks %s", e.Env, kv)
		}
	}
	spec := cache.GetDevice(ids[0]).GetSpec()
	if got := hostPaths(spec.ContainerEdits.DeviceNodes); !slices.Contains(got, filepath.Join(root, "dev/nvidiactl")) || !slices.Contains(got, filepath.Join(root, "dev/nvidia-uvm")) {
		t.Errorf("spec-wide nodes %v lack nvidiactl/nvidia-uvm", got)
	}
}

func TestShareEnforcement(t *testing.T) {
	share := cdi.Device{Name: claimUID + "-gpu-0-share-s1", Device: "gpu-0-share", GPUs: []cdi.GPU{gpu0}, MemoryBytes: 10 << 30, ComputePercent: 25}
	tests := []struct {
		name      string
		node      cdi.Node
		limits    cdi.Limits
		mps       *cdi.MPS
		wantEnv   []string
		noEnvs    []string
		wantMount []string // container paths
	}{
		{
			name: "HAMi with libvgpu.so mounts and preloads it", node: cdi.Node{VGPULibrary: "/opt/hami/libvgpu.so"},
			limits:    cdi.Limits{MemoryMiB: 10240, ComputePercent: 25, HAMi: true},
			wantEnv:   []string{"CUDA_DEVICE_MEMORY_LIMIT_0=10240m", "CUDA_DEVICE_SM_LIMIT=25", "LD_PRELOAD=/usr/local/vgpu/libvgpu.so", "CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/vgpu/" + share.Name + ".cache"},
			wantMount: []string{cdi.VGPUCacheDir, cdi.VGPULibraryPath},
		},
		{
			name: "HAMi share without compute cap sets no SM limit", node: cdi.Node{VGPULibrary: "/opt/hami/libvgpu.so"},
			limits:  cdi.Limits{MemoryMiB: 2048, HAMi: true},
			wantEnv: []string{"CUDA_DEVICE_MEMORY_LIMIT_0=2048m"}, noEnvs: []string{"CUDA_DEVICE_SM_LIMIT"},
			wantMount: []string{cdi.VGPUCacheDir, cdi.VGPULibraryPath},
		},
		{
			name:      "MPS limits when HAMi is not used",
			limits:    cdi.Limits{MemoryMiB: 10240, ComputePercent: 25},
			mps:       &cdi.MPS{PipeDir: "/run/gpudra/mps/x/pipe", LogDir: "/run/gpudra/mps/x/log", ActiveThreadPercent: 25, PinnedMemoryMiB: 10240},
			wantEnv:   []string{"CUDA_MPS_PIPE_DIRECTORY=" + cdi.MPSPipeDir, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=10240M"},
			noEnvs:    []string{"LD_PRELOAD", "CUDA_DEVICE_MEMORY_LIMIT_0"},
			wantMount: []string{cdi.MPSPipeDir, cdi.MPSLogDir},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := share
			d.Limits = &tc.limits
			d.MPS = tc.mps
			if tc.limits.HAMi {
				d.CacheDir = t.TempDir()
			}
			cache, ids, _ := written(t, tc.node, d)
			e := edits(t, cache, ids[0])
			for _, kv := range append(tc.wantEnv, "GPUDRA_MEMORY_MIB_0=10240", "GPUDRA_COMPUTE_PERCENT_0=25") {
				if !hasEnv(e, kv) {
					t.Errorf("env %v lacks %s", e.Env, kv)
				}
			}
			for _, k := range tc.noEnvs {
				for _, kv := range e.Env {
					if strings.HasPrefix(kv, k+"=") {
						t.Errorf("env has %s", kv)
					}
				}
			}
			var mounts []string
			for _, m := range e.Mounts {
				mounts = append(mounts, m.ContainerPath)
			}
			if !slices.Equal(mounts, tc.wantMount) {
				t.Errorf("mounts %v, want %v", mounts, tc.wantMount)
			}
		})
	}
}

func TestMIGSpecHasCapsAndParent(t *testing.T) {
	root := t.TempDir()
	node := cdi.Node{DriverRoot: root}
	gi, ci, err := node.MIGCapMinors(1, 2, 0)
	if err != nil || gi != 3+135+18 || ci != gi+1 {
		t.Fatalf("computed minors %d %d %v", gi, ci, err)
	}
	if err := os.MkdirAll(filepath.Join(root, "proc/driver/nvidia-caps"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "proc/driver/nvidia-caps/mig-minors"), []byte("config 1\nmonitor 2\ngpu1/gi2/access 40\ngpu1/gi2/ci0/access 41\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if gi, ci, err = node.MIGCapMinors(1, 2, 0); err != nil || gi != 40 || ci != 41 {
		t.Fatalf("minors from mig-minors: %d %d %v", gi, ci, err)
	}
	mig := &cdi.MIG{Parent: cdi.GPU{Index: 1, Minor: 1, UUID: "GPU-bbbb"}, GI: 2, CI: 0, UUID: "MIG-GPU-bbbb/2/0", GICapMinor: gi, CICapMinor: ci}
	cache, ids, _ := written(t, node, cdi.Device{Name: claimUID + "-gpu-1-mig-1g10gb-4", Device: "gpu-1-mig-1g10gb-4", MIG: mig, MemoryBytes: 10 << 30, ComputePercent: 14})
	e := edits(t, cache, ids[0])
	want := []string{filepath.Join(root, "dev/nvidia1"), filepath.Join(root, "dev/nvidia-caps/nvidia-cap40"), filepath.Join(root, "dev/nvidia-caps/nvidia-cap41")}
	if got := hostPaths(e.DeviceNodes); !slices.Equal(got, want) {
		t.Errorf("nodes %v, want %v", got, want)
	}
	if !hasEnv(e, "NVIDIA_VISIBLE_DEVICES=MIG-GPU-bbbb/2/0") {
		t.Errorf("env %v", e.Env)
	}
}

func TestClaimWithSeveralDevicesAgreesOnClaimWideEnv(t *testing.T) {
	cache, ids, _ := written(t, cdi.Node{},
		cdi.Device{Name: claimUID + "-gpu-0", Device: "gpu-0", GPUs: []cdi.GPU{gpu0}, MemoryBytes: 1 << 30, ComputePercent: 100},
		cdi.Device{Name: claimUID + "-gpu-3", Device: "gpu-3", GPUs: []cdi.GPU{gpu3}, MemoryBytes: 2 << 30, ComputePercent: 100})
	for _, id := range ids {
		e := edits(t, cache, id)
		if !hasEnv(e, "NVIDIA_VISIBLE_DEVICES=GPU-aaaa,GPU-dddd") || !hasEnv(e, "GPUDRA_DEVICES=gpu-0,gpu-3") {
			t.Errorf("%s env %v", id, e.Env)
		}
	}
	if e := edits(t, cache, ids[1]); !hasEnv(e, "GPUDRA_MEMORY_MIB_1=2048") {
		t.Errorf("second device is at position 1: %v", e.Env)
	}
}

func TestRemoveAndList(t *testing.T) {
	dir := t.TempDir()
	specs, err := cdi.NewSpecs(dir)
	if err != nil {
		t.Fatal(err)
	}
	dev := cdi.Device{Name: "a-gpu-0", Device: "gpu-0", GPUs: []cdi.GPU{gpu0}}
	for _, uid := range []string{"a", "b"} {
		if _, err := specs.Write(uid, cdi.Node{}, []cdi.Device{dev}, []byte("rec-"+uid)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "other-vendor.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := specs.Claims()
	if err != nil || len(got) != 2 || got["a"] != "rec-a" || got["b"] != "rec-b" {
		t.Fatalf("claims %v %v", got, err)
	}
	if err := specs.Remove("a"); err != nil {
		t.Fatal(err)
	}
	if err := specs.Remove("a"); err != nil {
		t.Fatalf("removing twice: %v", err)
	}
	if specs.Exists("a") || !specs.Exists("b") {
		t.Error("a should be gone, b kept")
	}
}

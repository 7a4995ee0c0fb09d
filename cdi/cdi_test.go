package cdi_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
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
	ids, err := specs.Write(claimUID, "train", node, devs, []byte(`{"state":"PrepareCompleted"}`))
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
	for _, kv := range []string{"GPUDRA_VISIBLE_DEVICES=GPU-dddd", "GPUDRA_DEVICES=gpu-3", "GPUDRA_MEMORY_MIB_0=81920", "GPUDRA_COMPUTE_PERCENT_0=100"} {
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
		// recordedBeforePreloadFiles: the share's record has no preload file.
		recordedBeforePreloadFiles bool
	}{
		{
			name: "HAMi with libvgpu.so mounts it and preloads it by a read-only /etc/ld.so.preload", node: cdi.Node{VGPULibrary: "/opt/hami/libvgpu.so"},
			limits:    cdi.Limits{MemoryMiB: 10240, ComputePercent: 25, HAMi: true},
			wantEnv:   []string{"CUDA_DEVICE_MEMORY_LIMIT_0=10240m", "CUDA_DEVICE_SM_LIMIT_0=25", "CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/vgpu/" + share.Name + ".cache"},
			noEnvs:    []string{"LD_PRELOAD", "CUDA_DEVICE_SM_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT"},
			wantMount: []string{cdi.VGPUCacheDir, cdi.VGPULibraryPath, cdi.VGPUPreloadPath},
		},
		{
			name: "HAMi share without compute cap sets no SM limit", node: cdi.Node{VGPULibrary: "/opt/hami/libvgpu.so"},
			limits:  cdi.Limits{MemoryMiB: 2048, HAMi: true},
			wantEnv: []string{"CUDA_DEVICE_MEMORY_LIMIT_0=2048m"}, noEnvs: []string{"CUDA_DEVICE_SM_LIMIT", "CUDA_DEVICE_SM_LIMIT_0", "LD_PRELOAD"},
			wantMount: []string{cdi.VGPUCacheDir, cdi.VGPULibraryPath, cdi.VGPUPreloadPath},
		},
		{
			name: "HAMi share recorded before preload files keeps LD_PRELOAD", node: cdi.Node{VGPULibrary: "/opt/hami/libvgpu.so"},
			limits: cdi.Limits{MemoryMiB: 2048, HAMi: true}, recordedBeforePreloadFiles: true,
			wantEnv:   []string{"CUDA_DEVICE_MEMORY_LIMIT_0=2048m", "LD_PRELOAD=" + cdi.VGPULibraryPath},
			wantMount: []string{cdi.VGPUCacheDir, cdi.VGPULibraryPath},
		},
		{
			name:      "MPS limits when HAMi is not used",
			limits:    cdi.Limits{MemoryMiB: 10240, ComputePercent: 25},
			mps:       &cdi.MPS{PipeDir: "/run/gpudra/mps/x/pipe", LogDir: "/run/gpudra/mps/x/log", ShmDir: "/run/gpudra/mps/x/shm", ActiveThreadPercent: 25, PinnedMemoryMiB: 10240},
			wantEnv:   []string{"CUDA_MPS_PIPE_DIRECTORY=" + cdi.MPSPipeDir, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=10240M"},
			noEnvs:    []string{"LD_PRELOAD", "CUDA_DEVICE_MEMORY_LIMIT_0"},
			wantMount: []string{cdi.MPSPipeDir, cdi.MPSLogDir, cdi.MPSShmDir},
		},
		{
			name:      "MPS of a claim recorded without a shm directory keeps the pod's /dev/shm",
			limits:    cdi.Limits{MemoryMiB: 10240, ComputePercent: 25},
			mps:       &cdi.MPS{PipeDir: "/run/gpudra/mps/x/pipe", LogDir: "/run/gpudra/mps/x/log", ActiveThreadPercent: 25, PinnedMemoryMiB: 10240},
			wantEnv:   []string{"CUDA_MPS_PIPE_DIRECTORY=" + cdi.MPSPipeDir},
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
				if !tc.recordedBeforePreloadFiles {
					d.PreloadFile = filepath.Join(d.CacheDir, "preload")
				}
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
	if !hasEnv(e, "GPUDRA_VISIBLE_DEVICES=MIG-GPU-bbbb/2/0") {
		t.Errorf("env %v", e.Env)
	}
}

func TestClaimWithSeveralDevicesAgreesOnClaimWideEnv(t *testing.T) {
	cache, ids, _ := written(t, cdi.Node{},
		cdi.Device{Name: claimUID + "-gpu-0", Device: "gpu-0", GPUs: []cdi.GPU{gpu0}, MemoryBytes: 1 << 30, ComputePercent: 100},
		cdi.Device{Name: claimUID + "-gpu-3", Device: "gpu-3", GPUs: []cdi.GPU{gpu3}, MemoryBytes: 2 << 30, ComputePercent: 100})
	for _, id := range ids {
		e := edits(t, cache, id)
		if !hasEnv(e, "GPUDRA_VISIBLE_DEVICES=GPU-aaaa,GPU-dddd") || !hasEnv(e, "GPUDRA_DEVICES=gpu-0,gpu-3") {
			t.Errorf("%s env %v", id, e.Env)
		}
	}
	if e := edits(t, cache, ids[1]); !hasEnv(e, "GPUDRA_MEMORY_MIB_1=2048") {
		t.Errorf("second device is at position 1: %v", e.Env)
	}
}

// A container given two claims (a pod's two claims in one container) gets the claim-wide
// variables of one of them, the runtime applying the claims' specs in turn; each claim's
// own variables, named after the claim, tell it what every claim got.
func TestContainerWithTwoClaimsSeesEachClaimsOwnVariables(t *testing.T) {
	dir := t.TempDir()
	specs, err := cdi.NewSpecs(dir)
	if err != nil {
		t.Fatal(err)
	}
	train, err := specs.Write("uid-train", "train", cdi.Node{}, []cdi.Device{
		{Name: "uid-train-gpu-0", Device: "gpu-0", GPUs: []cdi.GPU{gpu0}, MemoryBytes: 80 << 30, ComputePercent: 100},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mig := &cdi.MIG{Parent: cdi.GPU{Index: 1, Minor: 1, UUID: "GPU-bbbb"}, GI: 2, UUID: "MIG-GPU-bbbb/2/0", GICapMinor: 40, CICapMinor: 41}
	eval, err := specs.Write("uid-eval", "eval-gpus.v2", cdi.Node{}, []cdi.Device{
		{Name: "uid-eval-gpu-3-share", Device: "gpu-3-share", GPUs: []cdi.GPU{gpu3}, MemoryBytes: 10 << 30, ComputePercent: 25},
		{Name: "uid-eval-gpu-1-mig-1g10gb-4", Device: "gpu-1-mig-1g10gb-4", MIG: mig, MemoryBytes: 10 << 30, ComputePercent: 14},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	env := containerEnv(t, cache, append(train, eval...)...)
	for k, v := range map[string]string{
		"GPUDRA_CLAIM_TRAIN_VISIBLE_DEVICES":        "GPU-aaaa",
		"GPUDRA_CLAIM_TRAIN_DEVICES":                "gpu-0",
		"GPUDRA_CLAIM_TRAIN_MEMORY_MIB":             "81920",
		"GPUDRA_CLAIM_TRAIN_COMPUTE_PERCENT":        "100",
		"GPUDRA_CLAIM_EVAL_GPUS_V2_VISIBLE_DEVICES": "GPU-dddd,MIG-GPU-bbbb/2/0",
		"GPUDRA_CLAIM_EVAL_GPUS_V2_DEVICES":         "gpu-3-share,gpu-1-mig-1g10gb-4",
		"GPUDRA_CLAIM_EVAL_GPUS_V2_MEMORY_MIB":      "10240,10240",
		"GPUDRA_CLAIM_EVAL_GPUS_V2_COMPUTE_PERCENT": "25,14",
	} {
		if env[k] != v {
			t.Errorf("the container's %s=%q, want %q", k, env[k], v)
		}
	}
	if got := env["GPUDRA_VISIBLE_DEVICES"]; got != "GPU-aaaa" && got != "GPU-dddd,MIG-GPU-bbbb/2/0" {
		t.Errorf("GPUDRA_VISIBLE_DEVICES=%q, want one claim's", got)
	}
	if got := cdi.ClaimEnvPrefix("a-b.c9"); got != "GPUDRA_CLAIM_A_B_C9_" {
		t.Errorf("ClaimEnvPrefix(a-b.c9) = %q", got)
	}
}

// containerEnv is the environment of a container made from a CUDA image (whose
// Dockerfile sets NVIDIA_VISIBLE_DEVICES=all) and given the CDI devices ids, as
// containerd makes it before it runs the OCI runtime, which may be NVIDIA's.
// The spec's device nodes are made FIFOs (the CDI library takes them, and making them
// needs no privilege).
func containerEnv(t *testing.T, cache *cdiapi.Cache, ids ...string) map[string]string {
	t.Helper()
	makeNodes(t, cache, ids...)
	spec := &oci.Spec{Process: &oci.Process{Env: []string{"PATH=/usr/bin", "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"}}}
	if unresolved, err := cache.InjectDevices(spec, ids...); err != nil {
		t.Fatalf("injecting %v (unresolved %v): %v", ids, unresolved, err)
	}
	out := map[string]string{}
	for _, kv := range spec.Process.Env {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	return out
}

// The NVIDIA Container Runtime, on nodes that run it, injects the devices that
// NVIDIA_VISIBLE_DEVICES names (and every GPU for "all"); gpudra's containers have them
// from the CDI spec already, so the runtime must see "void", and the workload reads its
// devices' UUIDs from GPUDRA_VISIBLE_DEVICES.
func TestContainersHideTheirDevicesFromNVIDIAsRuntime(t *testing.T) {
	mig := &cdi.MIG{Parent: cdi.GPU{Index: 1, Minor: 1, UUID: "GPU-bbbb"}, GI: 2, UUID: "MIG-GPU-bbbb/2/0", GICapMinor: 40, CICapMinor: 41}
	tests := []struct {
		name        string
		devs        []cdi.Device
		wantVisible string
	}{
		{"whole GPU", []cdi.Device{{Name: claimUID + "-gpu-3", Device: "gpu-3", GPUs: []cdi.GPU{gpu3}}}, "GPU-dddd"},
		{"NVLink group", []cdi.Device{{Name: claimUID + "-nvlink-0-3", Device: "nvlink-0-3", GPUs: []cdi.GPU{gpu0, gpu3}}}, "GPU-aaaa,GPU-dddd"},
		{"MIG device", []cdi.Device{{Name: claimUID + "-gpu-1-mig-1g10gb-4", Device: "gpu-1-mig-1g10gb-4", MIG: mig}}, "MIG-GPU-bbbb/2/0"},
		{"two devices of one claim", []cdi.Device{
			{Name: claimUID + "-gpu-0", Device: "gpu-0", GPUs: []cdi.GPU{gpu0}},
			{Name: claimUID + "-gpu-3", Device: "gpu-3", GPUs: []cdi.GPU{gpu3}},
		}, "GPU-aaaa,GPU-dddd"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cache, ids, _ := written(t, cdi.Node{DriverRoot: t.TempDir()}, tc.devs...)
			env := containerEnv(t, cache, ids...)
			if got := env["NVIDIA_VISIBLE_DEVICES"]; got != "void" {
				t.Errorf("the container's NVIDIA_VISIBLE_DEVICES=%q: NVIDIA's runtime would inject those devices again; want void", got)
			}
			if got := env["GPUDRA_VISIBLE_DEVICES"]; got != tc.wantVisible {
				t.Errorf("the container's GPUDRA_VISIBLE_DEVICES=%q, want %q", got, tc.wantVisible)
			}
			// Each device alone too: the guard is spec-wide, no device replaces it.
			for _, id := range ids {
				if got := containerEnv(t, cache, id)["NVIDIA_VISIBLE_DEVICES"]; got != "void" {
					t.Errorf("given only %s, NVIDIA_VISIBLE_DEVICES=%q, want void", id, got)
				}
			}
		})
	}
}

// makeNodes makes the device nodes of the devices ids as FIFOs.
func makeNodes(t *testing.T, cache *cdiapi.Cache, ids ...string) {
	t.Helper()
	for _, id := range ids {
		d := cache.GetDevice(id)
		for _, n := range slices.Concat(d.GetSpec().ContainerEdits.DeviceNodes, d.ContainerEdits.DeviceNodes) {
			if err := os.MkdirAll(filepath.Dir(n.HostPath), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mkfifo(n.HostPath, 0o600); err != nil && !errors.Is(err, os.ErrExist) {
				t.Fatal(err)
			}
		}
	}
}

// containerMounts are the mounts of a container given the CDI devices ids, made from a
// spec that has the mounts a runtime gives every container (its own /dev/shm among
// them), as containerd makes it before it runs the OCI runtime.
func containerMounts(t *testing.T, cache *cdiapi.Cache, ids ...string) []oci.Mount {
	t.Helper()
	spec := &oci.Spec{Process: &oci.Process{}, Mounts: []oci.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs"},
		{Destination: "/dev/shm", Type: "bind", Source: "/run/containerd/sandboxes/pod/shm", Options: []string{"rbind", "ro"}},
	}}
	makeNodes(t, cache, ids...)
	if unresolved, err := cache.InjectDevices(spec, ids...); err != nil {
		t.Fatalf("injecting %v (unresolved %v): %v", ids, unresolved, err)
	}
	return spec.Mounts
}

// MPS clients share POSIX shared memory with the MPS server in /dev/shm: every
// container of an MPS claim gets the claim's shm directory there, instead of its pod's,
// and two claims get two directories.
func TestMPSClaimsContainersShareTheClaimsShmDirectory(t *testing.T) {
	claim := func(uid string, gpu cdi.GPU) cdi.Device {
		dir := "/var/lib/kubelet/plugins/gpu.gpudra.dev/mps/" + uid
		return cdi.Device{Name: uid + "-gpu-" + strconv.Itoa(gpu.Index), Device: "gpu-" + strconv.Itoa(gpu.Index), GPUs: []cdi.GPU{gpu},
			MPS: &cdi.MPS{PipeDir: dir + "/pipe", LogDir: dir + "/log", ShmDir: dir + "/shm"}}
	}
	for _, tc := range []struct {
		uid string
		gpu cdi.GPU
	}{{"claim-a", gpu0}, {"claim-b", gpu3}} {
		dev := claim(tc.uid, tc.gpu)
		cache, ids, _ := written(t, cdi.Node{DriverRoot: t.TempDir()}, dev)
		var shm []oci.Mount
		for _, m := range containerMounts(t, cache, ids...) {
			if m.Destination == cdi.MPSShmDir {
				shm = append(shm, m)
			}
		}
		if len(shm) != 1 || shm[0].Source != dev.MPS.ShmDir {
			t.Errorf("%s: the container's %s mounts %+v, want only the claim's %s", tc.uid, cdi.MPSShmDir, shm, dev.MPS.ShmDir)
			continue
		}
		if opts := shm[0].Options; !slices.Contains(opts, "rw") || !slices.Contains(opts, "rbind") || !slices.Contains(opts, "nosuid") || !slices.Contains(opts, "nodev") {
			t.Errorf("%s: %s mount options %v, want rbind, rw, nosuid, nodev", tc.uid, cdi.MPSShmDir, opts)
		}
	}
	// A claim recorded before claims had a shm directory leaves the pod's.
	old := claim("claim-old", gpu0)
	old.MPS.ShmDir = ""
	cache, ids, _ := written(t, cdi.Node{DriverRoot: t.TempDir()}, old)
	for _, m := range containerMounts(t, cache, ids...) {
		if m.Destination == cdi.MPSShmDir && m.Source != "/run/containerd/sandboxes/pod/shm" {
			t.Errorf("a claim without a shm directory replaced the pod's /dev/shm with %+v", m)
		}
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
		if _, err := specs.Write(uid, "", cdi.Node{}, []cdi.Device{dev}, []byte("rec-"+uid)); err != nil {
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

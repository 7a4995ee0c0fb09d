package kubeletplugin_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpudra/gpudra/cdi"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

func TestWholeGPUClaimGetsItsDeviceNodeAndUUID(t *testing.T) {
	n := newNode(t, "dgx-h100")
	d := n.newDriver(nil)
	c := n.allocate(wholeGPU)
	devs := mustPrepare(t, d, c)
	if len(devs) != 1 || devs[0].DeviceName != "gpu-2" || devs[0].PoolName != nodeName || devs[0].Requests[0] != "gpu" {
		t.Fatalf("devices %+v", devs)
	}
	want := "gpudra.dev/gpu=" + string(c.UID) + "-gpu-2"
	if !reflect.DeepEqual(devs[0].CDIDeviceIDs, []string{want}) {
		t.Fatalf("CDI ids %v, want %s", devs[0].CDIDeviceIDs, want)
	}
	spec := n.spec(c)
	if spec == nil || len(spec.Devices) != 1 {
		t.Fatalf("spec %+v", spec)
	}
	e := spec.Devices[0].ContainerEdits
	if len(e.DeviceNodes) != 1 || e.DeviceNodes[0].Path != "/dev/nvidia2" || e.DeviceNodes[0].HostPath != filepath.Join(n.cfg.DriverRoot, "dev/nvidia2") {
		t.Errorf("device nodes %+v", e.DeviceNodes)
	}
	uuid := d.Inventory().GPU(2).UUID
	if got := env(e)["GPUDRA_VISIBLE_DEVICES"]; got != uuid {
		t.Errorf("GPUDRA_VISIBLE_DEVICES=%s, want %s", got, uuid)
	}
	if got := env(e)["GPUDRA_MEMORY_MIB_0"]; got != "81559" && got != "81920" {
		t.Errorf("GPUDRA_MEMORY_MIB_0=%s", got)
	}
	// The claim's own variables are named after it ...
	if got := env(e)[cdi.ClaimEnvPrefix(c.Name)+"VISIBLE_DEVICES"]; got != uuid {
		t.Errorf("%sVISIBLE_DEVICES=%q, want %s (env %v)", cdi.ClaimEnvPrefix(c.Name), got, uuid, e.Env)
	}
	// ... or, for a claim made from a pod's template, after the pod's name for it, which
	// the user wrote (the claim's own name has a random suffix); a restarted plugin
	// writing the spec again from its checkpoint keeps that name.
	tc := n.allocate(gpuClaim("5", ""))
	tc.Annotations = map[string]string{resourceapi.PodResourceClaimAnnotation: "train-gpu"}
	mustPrepare(t, d, tc)
	if err := os.Remove(n.specPath(tc.UID)); err != nil {
		t.Fatal(err)
	}
	mustPrepare(t, n.newDriver(nil), tc)
	te := n.spec(tc).Devices[0].ContainerEdits
	if got := env(te)["GPUDRA_CLAIM_TRAIN_GPU_DEVICES"]; got != "gpu-5" {
		t.Errorf("GPUDRA_CLAIM_TRAIN_GPU_DEVICES=%q, want gpu-5 (env %v)", got, te.Env)
	}
}

func TestShareClaimCarriesItsLimits(t *testing.T) {
	tests := []struct {
		name    string
		vgpu    string
		config  string
		wantEnv map[string]string
		absent  []string
	}{
		{
			name: "HAMi-core when the node has libvgpu.so", vgpu: "/opt/hami/libvgpu.so",
			wantEnv: map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "10240m", "CUDA_DEVICE_SM_LIMIT_0": "25", "GPUDRA_MEMORY_MIB_0": "10240", "GPUDRA_COMPUTE_PERCENT_0": "25"},
			absent:  []string{"CUDA_MPS_PIPE_DIRECTORY", "LD_PRELOAD"},
		},
		{
			name:    "MPS limits when the node has no libvgpu.so",
			wantEnv: map[string]string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=10240M", "GPUDRA_MEMORY_MIB_0": "10240"},
			absent:  []string{"LD_PRELOAD", "CUDA_DEVICE_MEMORY_LIMIT_0"},
		},
		{
			name: "MPS enforcement chosen by config on a HAMi node", vgpu: "/opt/hami/libvgpu.so",
			config:  "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nlimits: {enforcement: MPS}",
			wantEnv: map[string]string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25", "CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps"},
			absent:  []string{"LD_PRELOAD"},
		},
		{
			name:    "a config's lower MPS thread cap wins over the share's",
			config:  "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {strategy: MPS, mps: {defaultActiveThreadPercentage: 10, defaultPinnedDeviceMemoryLimit: 4Gi}}",
			wantEnv: map[string]string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "10", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4096M"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, "dgx-h100", func(c *plugin.Config) { c.VGPULibrary = tc.vgpu })
			d := n.newDriver(nil)
			c := n.allocate(shareClaim("10Gi", "25", tc.config))
			devs := mustPrepare(t, d, c)
			if devs[0].ShareID == nil || !strings.Contains(devs[0].CDIDeviceIDs[0], string(*devs[0].ShareID)) {
				t.Errorf("share device %+v: CDI name must carry the share id", devs[0])
			}
			got := env(n.spec(c).Devices[0].ContainerEdits)
			checkEnv(t, got, tc.wantEnv, tc.absent)
		})
	}
}

// Every share tier under both mechanisms: what the container's environment enforces.
func TestShareTiersBecomeLimits(t *testing.T) {
	const hami = "/opt/hami/libvgpu.so"
	cfg := func(limits string) string {
		return "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nlimits: " + limits
	}
	tests := []struct {
		name, vgpu, compute, config string
		wantEnv                     map[string]string
		absent                      []string
	}{
		{name: "Fixed under HAMi-core caps at the request", vgpu: hami, compute: "25", config: cfg("{policy: Fixed}"),
			wantEnv: map[string]string{"CUDA_DEVICE_SM_LIMIT_0": "25", "GPUDRA_SHARE_POLICY_0": "Fixed", "GPUDRA_COMPUTE_LIMIT_0": "25", "GPUDRA_COMPUTE_PERCENT_0": "25"},
			absent:  []string{"CUDA_TASK_PRIORITY"}},
		{name: "Fixed under MPS caps at the request", compute: "25", config: cfg("{policy: Fixed}"),
			wantEnv: map[string]string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25", "GPUDRA_SHARE_POLICY_0": "Fixed"},
			absent:  []string{"CUDA_MPS_CLIENT_PRIORITY"}},
		{name: "Guaranteed under HAMi-core reserves 30 and bursts uncapped", vgpu: hami, compute: "30", config: cfg("{policy: Guaranteed, priority: High}"),
			wantEnv: map[string]string{"GPUDRA_COMPUTE_PERCENT_0": "30", "GPUDRA_COMPUTE_LIMIT_0": "100", "GPUDRA_SHARE_POLICY_0": "Guaranteed", "CUDA_TASK_PRIORITY": "0", "GPUDRA_SHARE_PRIORITY_0": "High"},
			absent:  []string{"CUDA_DEVICE_SM_LIMIT_0"}},
		{name: "Guaranteed under HAMi-core with a cap", vgpu: hami, compute: "30", config: cfg("{policy: Guaranteed, computeLimit: 70}"),
			wantEnv: map[string]string{"CUDA_DEVICE_SM_LIMIT_0": "70", "GPUDRA_COMPUTE_PERCENT_0": "30"}},
		{name: "Guaranteed under MPS caps the threads at the limit, not the floor", compute: "30", config: cfg("{policy: Guaranteed, computeLimit: 70}"),
			wantEnv: map[string]string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "70", "GPUDRA_COMPUTE_PERCENT_0": "30"}},
		{name: "Guaranteed under MPS without a cap sets no thread limit", compute: "30", config: cfg("{policy: Guaranteed}"),
			absent: []string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"}},
		{name: "BestEffort under HAMi-core runs at low priority", vgpu: hami, compute: "0", config: cfg("{policy: BestEffort, computeLimit: 50}"),
			wantEnv: map[string]string{"CUDA_DEVICE_SM_LIMIT_0": "50", "CUDA_TASK_PRIORITY": "1", "GPUDRA_SHARE_POLICY_0": "BestEffort", "GPUDRA_COMPUTE_PERCENT_0": "0"}},
		{name: "BestEffort under MPS is a below-normal client", compute: "0", config: cfg("{policy: BestEffort}"),
			wantEnv: map[string]string{"CUDA_MPS_CLIENT_PRIORITY": "1", "GPUDRA_SHARE_PRIORITY_0": "Low"},
			absent:  []string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"}},
		{name: "a Low priority Fixed share under MPS", compute: "20", config: cfg("{priority: Low}"),
			wantEnv: map[string]string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "20", "CUDA_MPS_CLIENT_PRIORITY": "1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, "dgx-h100", func(c *plugin.Config) { c.VGPULibrary = tc.vgpu })
			c := n.allocate(shareClaim("10Gi", tc.compute, tc.config))
			mustPrepare(t, n.newDriver(nil), c)
			got := env(n.spec(c).Devices[0].ContainerEdits)
			checkEnv(t, got, tc.wantEnv, tc.absent)
		})
	}
}

func TestShareTierRefusedAtPrepare(t *testing.T) {
	for name, tc := range map[string]struct{ claim, want string }{
		"Guaranteed without a floor":    {shareClaim("1Gi", "0", "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nlimits: {policy: Guaranteed}"), "floor is its compute request"},
		"BestEffort with a reservation": {shareClaim("1Gi", "10", "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nlimits: {policy: BestEffort}"), "reserves no compute"},
		"a tier on a whole GPU":         {wholeGPU + withConfig("gpu", "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nlimits: {policy: Guaranteed}"), "apply only to devices of type share"},
	} {
		t.Run(name, func(t *testing.T) {
			n := newNode(t, "dgx-h100")
			_, err := prepare(t, n.newDriver(nil), n.allocate(tc.claim))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("prepare error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestTwoSharesOfOneGPUArePreparedSideBySide(t *testing.T) {
	n := newNode(t, "l40s-pcie")
	d := n.newDriver(nil)
	a := n.allocate(shareClaim("8Gi", "50", ""))
	b := n.allocate(shareClaim("8Gi", "50", ""))
	mustPrepare(t, d, a)
	mustPrepare(t, d, b)
}

func TestInvalidConfigFailsPrepareNamingTheField(t *testing.T) {
	tests := []struct {
		name, claim string
		vgpu        string
		want        []string
	}{
		{"unknown strategy", shareClaim("1Gi", "10", "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {strategy: Magic}"),
			"", []string{"status.allocation.devices.config[0].opaque.parameters.sharing.strategy", `"MPS"`}},
		{"150% compute", shareClaim("1Gi", "10", "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {strategy: MPS, mps: {defaultActiveThreadPercentage: 150}}"),
			"", []string{"sharing.mps.defaultActiveThreadPercentage", "between 1 and 100"}},
		{"memory above the GPU's", wholeGPU + withConfig("gpu", "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {strategy: MPS, mps: {defaultPinnedDeviceMemoryLimit: 200Gi}}"),
			"", []string{"sharing.mps.defaultPinnedDeviceMemoryLimit", "exceeds the device's memory"}},
		{"pinned memory above the share's", shareClaim("1Gi", "10", "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {strategy: MPS, mps: {defaultPinnedDeviceMemoryLimit: 2Gi}}"),
			"", []string{"sharing.mps.defaultPinnedDeviceMemoryLimit"}},
		{"unknown field", shareClaim("1Gi", "10", "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {strategy: MPS, mps: {threads: 3}}"),
			"", []string{"parameters.sharing.mps.threads", "unknown field"}},
		{"wrong apiVersion", shareClaim("1Gi", "10", "apiVersion: gpu.gpudra.dev/v2\nkind: GpuConfig"),
			"", []string{"parameters.apiVersion", "gpu.gpudra.dev/v1alpha1"}},
		{"HAMi enforcement without libvgpu.so", shareClaim("1Gi", "10", "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nlimits: {enforcement: HAMi}"),
			"", []string{"limits.enforcement", "--vgpu-library"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, "dgx-h100")
			d := n.newDriver(nil)
			c := n.allocate(tc.claim)
			_, err := prepare(t, d, c)
			if err == nil {
				t.Fatal("prepare succeeded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if n.spec(c) != nil {
				t.Error("a failed prepare left a CDI spec")
			}
		})
	}
}

func TestMIGClaimCreatesOneInstanceAtItsPlacement(t *testing.T) {
	n := newNode(t, "dgx-h100")
	d := n.newDriver(nil)
	c := n.allocate(migClaim)
	want := n.allocatedPlacement(c)
	devs := mustPrepare(t, d, c)
	if got := n.migInstances(); !reflect.DeepEqual(got, []placement{want}) {
		t.Fatalf("MIG instances %v, want exactly %v", got, want)
	}
	e := n.spec(c).Devices[0].ContainerEdits
	var paths []string
	for _, dn := range e.DeviceNodes {
		paths = append(paths, dn.Path)
	}
	if len(paths) != 3 || paths[0] != "/dev/nvidia"+itoa(want.gpu) || !strings.HasPrefix(paths[1], "/dev/nvidia-caps/nvidia-cap") {
		t.Errorf("MIG device nodes %v", paths)
	}
	if v := env(e)["GPUDRA_VISIBLE_DEVICES"]; !strings.HasPrefix(v, "MIG-") {
		t.Errorf("GPUDRA_VISIBLE_DEVICES=%s", v)
	}
	if len(devs) != 1 {
		t.Fatalf("devices %+v", devs)
	}
	if err := unprepare(t, d, c); err != nil {
		t.Fatal(err)
	}
	if got := n.migInstances(); len(got) != 0 {
		t.Errorf("after unprepare MIG instances %v remain", got)
	}
	if n.spec(c) != nil {
		t.Error("after unprepare the CDI spec remains")
	}
}

func TestWholeGPUOnMIGModeGPUDisablesMIGMode(t *testing.T) {
	n := newNode(t, "dgx-h100")
	d := n.newDriver(nil)
	m := n.allocate(migClaim)
	mustPrepare(t, d, m)
	if err := unprepare(t, d, m); err != nil {
		t.Fatal(err)
	}
	n.alloc.Release(m.Status.Allocation)
	parent := n.allocatedPlacement(m).gpu
	c := n.allocate(strings.Replace(wholeGPU, "index == 2", "index == "+itoa(parent), 1))
	mustPrepare(t, d, c)
	dev, _ := n.backend.NVML.DeviceGetHandleByIndex(parent)
	if mode, _, _ := dev.GetMigMode(); mode != 0 {
		t.Errorf("GPU %d MIG mode %d after preparing it whole, want disabled", parent, mode)
	}
}

func TestPrepareIsIdempotentAndUnprepareOfUnknownClaimSucceeds(t *testing.T) {
	n := newNode(t, "dgx-h100")
	d := n.newDriver(nil)
	for _, spec := range []string{wholeGPU, migClaim, shareClaim("2Gi", "10", "")} {
		c := n.allocate(spec)
		first := mustPrepare(t, d, c)
		again := mustPrepare(t, d, c)
		if !reflect.DeepEqual(first, again) {
			t.Errorf("second prepare %+v, first %+v", again, first)
		}
		restarted := mustPrepare(t, n.newDriver(nil), c)
		if !reflect.DeepEqual(first, restarted) {
			t.Errorf("prepare after restart %+v, first %+v", restarted, first)
		}
		if err := unprepare(t, d, c); err != nil {
			t.Fatal(err)
		}
		if err := unprepare(t, d, c); err != nil {
			t.Fatalf("second unprepare: %v", err)
		}
	}
	if len(n.migInstances()) != 0 || n.specCount() != 0 {
		t.Errorf("leaked: MIG %v, specs %d", n.migInstances(), n.specCount())
	}
}

func TestDeviceHeldExclusivelyIsRefused(t *testing.T) {
	n := newNode(t, "dgx-h100")
	d := n.newDriver(nil)
	a := n.allocate(wholeGPU)
	mustPrepare(t, d, a)
	// A second allocation of the same GPU, as a stale scheduler view might produce.
	b := a.DeepCopy()
	b.UID, b.Name = "uid-other", "other"
	_, err := prepare(t, d, b)
	if err == nil || !strings.Contains(err.Error(), "gpu-2") || !strings.Contains(err.Error(), a.Name) {
		t.Fatalf("want a conflict naming gpu-2 and %s, got %v", a.Name, err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestShareCapacityOutOfRangeIsRefused: a share's consumed capacity that no allocator hands
// out (a status written by other means) is refused at prepare, naming the field, instead of
// wrapping into a small limit.
func TestShareCapacityOutOfRangeIsRefused(t *testing.T) {
	for _, tc := range []struct{ name, capacity, value, want string }{
		{"compute far above 100", "compute", "1e30", "consumedCapacity.compute"},
		{"compute past 2^64", "compute", "18446744073709551646", "consumedCapacity.compute"},
		{"negative compute", "compute", "-5", "consumedCapacity.compute"},
		{"no memory", "memory", "0", "consumedCapacity.memory"},
		{"memory past any GPU", "memory", "1e30", "consumedCapacity.memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, "dgx-h100")
			d := n.newDriver(nil)
			c := n.allocate(shareClaim("10Gi", "25", ""))
			r := &c.Status.Allocation.Devices.Results[0]
			if r.ConsumedCapacity == nil {
				r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{}
			}
			r.ConsumedCapacity[resourceapi.QualifiedName(tc.capacity)] = resource.MustParse(tc.value)
			_, err := prepare(t, d, c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("prepare: %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

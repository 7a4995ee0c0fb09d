package kubeletplugin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/moby/sys/mountinfo"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"sigs.k8s.io/yaml"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/driver/discover"
	"github.com/gpudra/gpudra/driver/simulated"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
	"github.com/gpudra/gpudra/kubeletplugin/mps/mpstest"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

const nodeName = "node-a"

// node is one simulated GPU node whose GPUs outlive plugin restarts: each newDriver
// starts a fresh plugin on the same directories and the same simulated GPUs.
type node struct {
	t       testing.TB
	backend *discover.Backend
	cfg     plugin.Config
	alloc   *allocation.State
	pool    *driver.Pool
	// mps and timeSlices are the node's MPS daemons and GPU time-slices; like the
	// simulated GPUs they outlive plugin restarts.
	mps        *fakeMPS
	timeSlices *fakeTimeSlicer
	// daemonPods is the API server of MPS control daemons in pods (newMPSPodsNode).
	daemonPods *fake.Clientset
}

// daemons are the node's MPS control daemons: their pipe directories, or, in pods, their
// Deployments' names.
func (n *node) daemons(t testing.TB) []string {
	t.Helper()
	if n.daemonPods != nil {
		return slices.Sorted(maps.Keys(deploymentsOf(t, n.daemonPods)))
	}
	return slices.Sorted(maps.Keys(n.mps.daemons()))
}

func newNode(t testing.TB, profile string, mutate ...func(*plugin.Config)) *node {
	t.Helper()
	b, err := simulated.Open(profile, nodeName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	dir := t.TempDir()
	// Claims left prepared keep their MPS shm tmpfs (when the test may mount): unmount
	// them before the directory goes.
	t.Cleanup(func() { unmountUnder(t, dir) })
	root := filepath.Join(dir, "driver-root")
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	bootID := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(bootID, []byte("boot-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mps, ts := &fakeMPS{running: map[string]prepared.MPSDaemon{}}, &fakeTimeSlicer{intervals: map[string]api.TimeSliceInterval{}}
	cfg := plugin.Config{
		MPS:           mps,
		TimeSlicer:    ts,
		NodeName:      nodeName,
		Backend:       b,
		CDIRoot:       filepath.Join(dir, "cdi"),
		CheckpointDir: filepath.Join(dir, "checkpoint"),
		DriverRoot:    root,
		BootIDPath:    bootID,
		Render:        driver.RenderOptions{MIG: driver.MIGDynamic},
		// Each plugin a test stops waits for its NVML event wait to end.
		NVMLEventWait: 20 * time.Millisecond,
	}
	for _, m := range mutate {
		m(&cfg)
	}
	n := nodeOn(t, b, cfg)
	n.mps, n.timeSlices = mps, ts
	return n
}

// nodeOn is a node of the tests whose plugin runs with cfg on backend b: what b discovers,
// rendered as cfg says, with an allocator over it.
func nodeOn(t testing.TB, b *discover.Backend, cfg plugin.Config) *node {
	t.Helper()
	inv, err := discover.Discover(b)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := driver.Render(inv, cfg.Render)
	if err != nil {
		t.Fatal(err)
	}
	classes, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	return &node{t: t, backend: b, cfg: cfg, pool: pool, alloc: allocation.New(classes, pool.ResourceSlices(nodeName, 1))}
}

var (
	canMountTmpfs = mpstest.CanMountTmpfs
	mountsUnder   = mpstest.MountsUnder
	unmountUnder  = mpstest.UnmountUnder
	mode          = mpstest.DirMode
)

// TestMain lets the test binary act as the plugin's "mps-exec" for the daemons that
// tests start with mps.Process (mpstest.Main).
func TestMain(m *testing.M) { mpstest.Main(m) }

// mountEntry is the last mount on exactly dir in this process's mount namespace: its
// filesystem type, source and mount options; ok false when nothing is mounted there.
func mountEntry(t testing.TB, dir string) (fsType, source, options string, ok bool) {
	t.Helper()
	mounts, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) { return m.Mountpoint != dir, false })
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) == 0 {
		return "", "", "", false
	}
	m := mounts[len(mounts)-1]
	return m.FSType, m.Source, m.Options, true
}

// backendGPU is the UUID of the simulated GPU at index.
func (n *node) backendGPU(index int) string {
	n.t.Helper()
	dev, ret := n.backend.NVML.DeviceGetHandleByIndex(index)
	if ret != nvml.SUCCESS {
		n.t.Fatalf("GPU %d: %v", index, ret)
	}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		n.t.Fatalf("GPU %d: %v", index, ret)
	}
	return uuid
}

// fakeMPS is the node's MPS control daemons: the ones running, by pipe directory, and
// every start.
type fakeMPS struct {
	mu      sync.Mutex
	running map[string]prepared.MPSDaemon
	started []prepared.MPSDaemon
	stops   int
	// failStart, when set, makes Start fail (a missing binary, a daemon that never answers).
	failStart error
}

func (f *fakeMPS) Start(d prepared.MPSDaemon) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failStart != nil {
		return 0, f.failStart
	}
	if _, ok := f.running[d.PipeDir]; ok {
		return 0, fmt.Errorf("a daemon already listens in %s", d.PipeDir)
	}
	if err := os.MkdirAll(d.PipeDir, 0o750); err != nil {
		return 0, err
	}
	f.running[d.PipeDir] = d
	f.started = append(f.started, d)
	return 1000 + len(f.started), nil
}

func (f *fakeMPS) Stop(pipeDir string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.running[pipeDir]; ok {
		f.stops++
		delete(f.running, pipeDir)
	}
	return nil
}

func (f *fakeMPS) Running(pipeDir string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.running[pipeDir]
	return ok, nil
}

// daemons are the running daemons, by pipe directory.
func (f *fakeMPS) daemons() map[string]prepared.MPSDaemon {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.running)
}

// kill makes every daemon die (as with the plugin's container).
func (f *fakeMPS) kill() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.running)
}

// fakeTimeSlicer is the node's GPUs' time-slices, by GPU UUID.
type fakeTimeSlicer struct {
	mu        sync.Mutex
	intervals map[string]api.TimeSliceInterval
	calls     int
}

func (f *fakeTimeSlicer) SetTimeSlice(_ context.Context, gpu string, iv api.TimeSliceInterval) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.intervals[gpu] = iv
	return nil
}

// callCount is how many times a time-slice was set.
func (f *fakeTimeSlicer) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// interval is the GPU's interval: Default unless one was set.
func (f *fakeTimeSlicer) interval(gpu string) api.TimeSliceInterval {
	f.mu.Lock()
	defer f.mu.Unlock()
	if iv, ok := f.intervals[gpu]; ok {
		return iv
	}
	return api.IntervalDefault
}

// newDriver starts a plugin (as after a restart) with an optional hook.
func (n *node) newDriver(hook plugin.Hook) *plugin.Driver {
	n.t.Helper()
	cfg := n.cfg
	cfg.Hook = hook
	d, err := plugin.New(context.Background(), cfg)
	if err != nil {
		n.t.Fatalf("starting the plugin: %v", err)
	}
	return d
}

var claimSeq atomic.Int64

// allocate parses a claim spec as a user writes it and allocates it with the real
// allocator, returning the claim as the kubelet hands it to the plugin.
func (n *node) allocate(specYAML string) *resourceapi.ResourceClaim {
	n.t.Helper()
	var spec resourceapi.ResourceClaimSpec
	if err := yaml.UnmarshalStrict([]byte(specYAML), &spec); err != nil {
		n.t.Fatalf("claim spec: %v\n%s", err, specYAML)
	}
	for k := range spec.Devices.Requests {
		if ex := spec.Devices.Requests[k].Exactly; ex != nil {
			if ex.AllocationMode == "" {
				ex.AllocationMode = resourceapi.DeviceAllocationModeExactCount
			}
			if ex.Count == 0 {
				ex.Count = 1
			}
		}
	}
	seq := claimSeq.Add(1)
	c := &resourceapi.ResourceClaim{Spec: spec}
	c.Name, c.Namespace, c.UID = fmt.Sprintf("claim-%d", seq), "default", types.UID(fmt.Sprintf("uid-%d", seq))
	res, err := n.alloc.AllocateAndCommit(context.Background(), nodeName, c)
	if err != nil {
		n.t.Fatalf("allocating %s: %v", c.Name, err)
	}
	c.Status.Allocation = &res[0]
	return c
}

func prepare(t testing.TB, d *plugin.Driver, c *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	t.Helper()
	out, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	if err != nil {
		t.Fatal(err)
	}
	return out[c.UID].Devices, out[c.UID].Err
}

func mustPrepare(t testing.TB, d *plugin.Driver, c *resourceapi.ResourceClaim) []kubeletplugin.Device {
	t.Helper()
	devs, err := prepare(t, d, c)
	if err != nil {
		t.Fatalf("prepare %s: %v", c.Name, err)
	}
	return devs
}

func unprepare(t testing.TB, d *plugin.Driver, c *resourceapi.ResourceClaim) error {
	t.Helper()
	out, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: c.UID}})
	if err != nil {
		t.Fatal(err)
	}
	return out[c.UID]
}

// spec reads the claim's CDI spec from disk; nil when there is none.
func (n *node) spec(c *resourceapi.ResourceClaim) *cdispec.Spec {
	n.t.Helper()
	raw, err := os.ReadFile(n.specPath(c.UID))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		n.t.Fatal(err)
	}
	var s cdispec.Spec
	if err := json.Unmarshal(raw, &s); err != nil {
		n.t.Fatal(err)
	}
	return &s
}

// specPath is where the claim's CDI spec is written.
func (n *node) specPath(uid types.UID) string {
	return filepath.Join(n.cfg.CDIRoot, "gpudra.dev-gpu_"+string(uid)+".json")
}

// specCount counts gpudra CDI specs on disk.
func (n *node) specCount() int {
	n.t.Helper()
	specs, err := cdi.NewSpecs(n.cfg.CDIRoot)
	if err != nil {
		n.t.Fatal(err)
	}
	claims, err := specs.Claims()
	if err != nil {
		n.t.Fatal(err)
	}
	return len(claims)
}

// placement is a MIG GPU instance's position on a GPU.
type placement struct{ gpu, start, size int }

// migInstances lists the MIG GPU instances on the simulated GPUs.
func (n *node) migInstances() []placement {
	n.t.Helper()
	var out []placement
	count, _ := n.backend.NVML.DeviceGetCount()
	for i := range count {
		dev, _ := n.backend.NVML.DeviceGetHandleByIndex(i)
		for id := range nvml.GPU_INSTANCE_PROFILE_COUNT {
			info, ret := dev.GetGpuInstanceProfileInfo(id)
			if ret != nvml.SUCCESS {
				continue
			}
			gis, ret := dev.GetGpuInstances(&info)
			if ret != nvml.SUCCESS {
				continue
			}
			for _, gi := range gis {
				gd, _ := gi.GetInfo()
				out = append(out, placement{i, int(gd.Placement.Start), int(gd.Placement.Size)})
			}
		}
	}
	return out
}

// allocatedPlacement is where the allocator put a MIG claim's device.
func (n *node) allocatedPlacement(c *resourceapi.ResourceClaim) placement {
	n.t.Helper()
	name := c.Status.Allocation.Devices.Results[0].Device
	for _, s := range n.pool.Slices {
		for _, d := range s.Devices {
			if d.Name == name {
				a := d.Attributes
				return placement{int(*a[api.AttrParentIndex].IntValue), int(*a[api.AttrMIGPlacementStart].IntValue), int(*a[api.AttrMIGPlacementSize].IntValue)}
			}
		}
	}
	n.t.Fatalf("device %s is not published", name)
	return placement{}
}

func env(e cdispec.ContainerEdits) map[string]string {
	out := map[string]string{}
	for _, kv := range e.Env {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	return out
}

const (
	wholeGPU = `
devices:
  requests:
  - name: gpu
    exactly:
      deviceClassName: gpu.gpudra.dev
      selectors:
      - cel:
          expression: device.attributes["gpu.gpudra.dev"].index == 2
`
	migClaim = `
devices:
  requests:
  - name: mig
    exactly:
      deviceClassName: mig.gpudra.dev
      selectors:
      - cel:
          expression: device.attributes["gpu.gpudra.dev"].migProfile == "1g.10gb"
`
)

func shareClaim(memory, compute, configYAML string) string {
	s := fmt.Sprintf(`
devices:
  requests:
  - name: share
    exactly:
      deviceClassName: gpu-share.gpudra.dev
      capacity:
        requests:
          memory: %s
          compute: %q
`, memory, compute)
	if configYAML != "" {
		s += withConfig("share", configYAML)
	}
	return s
}

// withConfig is a claim's config section with one opaque gpudra config.
func withConfig(request, parametersYAML string) string {
	out := "  config:\n  - requests: [" + request + "]\n    opaque:\n      driver: gpu.gpudra.dev\n      parameters:\n"
	for _, line := range strings.Split(strings.TrimSpace(parametersYAML), "\n") {
		out += "        " + line + "\n"
	}
	return out
}

func giHandles(t *testing.T, n *node, gpu int) []nvml.GpuInstance {
	t.Helper()
	dev, _ := n.backend.NVML.DeviceGetHandleByIndex(gpu)
	var out []nvml.GpuInstance
	for id := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := dev.GetGpuInstanceProfileInfo(id)
		if ret != nvml.SUCCESS {
			continue
		}
		gis, _ := dev.GetGpuInstances(&info)
		out = append(out, gis...)
	}
	return out
}

// checkEnv reports each variable of want that env lacks or has another value of, and each
// variable of absent that env has.
func checkEnv(t *testing.T, env, want map[string]string, absent []string) {
	t.Helper()
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s=%q, want %q (env %v)", k, env[k], v, env)
		}
	}
	for _, k := range absent {
		if v, ok := env[k]; ok {
			t.Errorf("env has %s=%s", k, v)
		}
	}
}

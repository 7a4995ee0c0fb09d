package kubeletplugin_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpudra/gpudra/driver/discover"
	"github.com/gpudra/gpudra/driver/nvmlsim"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
	"github.com/gpudra/gpudra/kubeletplugin/health"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// cluster is a plugin started as on a node, publishing to a fake API server.
type cluster struct {
	t      *testing.T
	n      *node
	d      *plugin.Driver
	client *fake.Clientset
}

// startOnCluster starts the plugin through Start (kubelet sockets, slice publishing,
// health watching) and waits until the API server has its slices.
func startOnCluster(t *testing.T, n *node, mutate ...func(*plugin.Config)) *cluster {
	t.Helper()
	c := startPlugin(t, n, mutate...)
	published := 0
	for _, s := range c.d.Pool().Slices {
		published += len(s.Devices)
	}
	c.waitForSlices(func(devs map[string]resourceapi.Device) bool { return len(devs) == published })
	return c
}

// startPlugin starts the plugin through Start. Socket paths must stay short, hence a
// directory of its own.
func startPlugin(t *testing.T, n *node, mutate ...func(*plugin.Config)) *cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "gpudra-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg := n.cfg
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-a-uid"}})
	var sliceSeq atomic.Int64
	client.PrependReactor("create", "resourceslices", func(action k8stesting.Action) (bool, runtime.Object, error) {
		// The fake API server does not generate names as the real one does.
		s := action.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice)
		if s.Name == "" {
			s.Name = s.GenerateName + strconv.FormatInt(sliceSeq.Add(1), 10)
		}
		return false, nil, nil
	})
	cfg.Client = client
	cfg.PluginDataDir = filepath.Join(dir, "plugin")
	cfg.RegistrarDir = filepath.Join(dir, "registry")
	for _, p := range []string{cfg.PluginDataDir, cfg.RegistrarDir} {
		if err := os.MkdirAll(p, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range mutate {
		m(&cfg)
	}
	d, err := plugin.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("starting the plugin: %v", err)
	}
	t.Cleanup(d.Stop)
	return &cluster{t: t, n: n, d: d, client: cfg.Client.(*fake.Clientset)}
}

// waitForSlices waits until the published devices satisfy ok, and returns them.
func (c *cluster) waitForSlices(ok func(map[string]resourceapi.Device) bool) map[string]resourceapi.Device {
	c.t.Helper()
	var devs map[string]resourceapi.Device
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		list, err := c.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			c.t.Fatal(err)
		}
		devs = map[string]resourceapi.Device{}
		// Only a complete pool is what the plugin publishes: all slices of its newest
		// generation. While it is still creating or replacing slices, the devices of the
		// missing ones would pass any check on "every device".
		var gen int64
		for _, s := range list.Items {
			gen = max(gen, s.Spec.Pool.Generation)
		}
		count, want := int64(0), int64(-1)
		for _, s := range list.Items {
			if s.Spec.Pool.Generation != gen {
				continue
			}
			count, want = count+1, s.Spec.Pool.ResourceSliceCount
			for _, d := range s.Spec.Devices {
				devs[d.Name] = d
			}
		}
		if count == want && ok(devs) {
			return devs
		}
	}
	c.t.Fatalf("the published slices never got as expected; %d devices, tainted: %v", len(devs), tainted(devs))
	return nil
}

func tainted(devs map[string]resourceapi.Device) []string {
	var out []string
	for name, d := range devs {
		if len(d.Taints) > 0 {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// usesGPU says from its published attributes whether a device uses GPU gpu.
func usesGPU(d resourceapi.Device, gpu int) bool {
	a := d.Attributes
	switch *a[api.AttrType].StringValue {
	case api.TypeGPU, api.TypeShare:
		return *a[api.AttrIndex].IntValue == int64(gpu)
	case api.TypeMIG:
		return *a[api.AttrParentIndex].IntValue == int64(gpu)
	case api.TypeNVLinkGroup:
		return slices.Contains(strings.Split(*a[api.AttrMembers].StringValue, "-"), strconv.Itoa(gpu))
	}
	return false
}

// allTainted is true once every device using GPU gpu carries at least n taints: all
// slices are republished (the API server receives them one by one).
func allTainted(gpu, n int) func(map[string]resourceapi.Device) bool {
	return func(devs map[string]resourceapi.Device) bool {
		for _, d := range devs {
			if usesGPU(d, gpu) && len(d.Taints) < n {
				return false
			}
		}
		return len(devs) > 0
	}
}

func inject(t *testing.T, n *node, gpu int, ev nvmlsim.Event) {
	t.Helper()
	if got, err := nvmlsim.Inject(n.backend.NVML, gpu, ev); err != nil || got != 1 {
		t.Fatalf("injecting into GPU %d: reached %d watchers, %v; want the plugin's", gpu, got, err)
	}
}

func TestUnhealthyGPUTaintsEveryDeviceUsingIt(t *testing.T) {
	tests := []struct {
		name   string
		event  nvmlsim.Event
		value  string
		effect resourceapi.DeviceTaintEffect
	}{
		{"XID 79, the GPU fell off the bus", nvmlsim.XID(79), "xid-79", resourceapi.DeviceTaintEffectNoExecute},
		{"XID 48, double-bit ECC", nvmlsim.XID(48), "xid-48", resourceapi.DeviceTaintEffectNoExecute},
		{"XID 74, an NVLink error", nvmlsim.XID(74), "xid-74", resourceapi.DeviceTaintEffectNoSchedule},
		{"double-bit ECC event", nvmlsim.DoubleBitECC, "double-bit-ecc", resourceapi.DeviceTaintEffectNoExecute},
		{"GPU unavailable", nvmlsim.GPUUnavailable, "gpu-unavailable", resourceapi.DeviceTaintEffectNoExecute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each on a node and a cluster of its own
			c := startOnCluster(t, newNode(t, "dgx-h100"))
			inject(t, c.n, 2, tc.event)
			devs := c.waitForSlices(allTainted(2, 1))
			var kinds []string
			for name, d := range devs {
				want := usesGPU(d, 2)
				if got := len(d.Taints) > 0; got != want {
					t.Errorf("%s: tainted %v, want %v", name, got, want)
					continue
				}
				if want {
					kinds = append(kinds, *d.Attributes[api.AttrType].StringValue)
					taint := d.Taints[0]
					if len(d.Taints) != 1 || taint.Key != api.TaintUnhealthy || taint.Value != tc.value || taint.Effect != tc.effect {
						t.Errorf("%s: taints %+v, want %s=%s:%s", name, d.Taints, api.TaintUnhealthy, tc.value, tc.effect)
					}
				}
			}
			for _, kind := range []string{api.TypeGPU, api.TypeShare, api.TypeMIG, api.TypeNVLinkGroup} {
				if !slices.Contains(kinds, kind) {
					t.Errorf("no %s device of GPU 2 is tainted: %v", kind, tainted(devs))
				}
			}
		})
	}
}

func TestApplicationEventsTaintNothing(t *testing.T) {
	c := startOnCluster(t, newNode(t, "dgx-h100"))
	for code := range health.ApplicationXIDs {
		inject(t, c.n, 2, nvmlsim.XID(code))
	}
	if _, err := nvmlsim.Inject(c.n.backend.NVML, 2, nvmlsim.SingleBitECC); err != nil {
		t.Fatal(err)
	}
	// The plugin has seen them all once it counted them; the slices must be untouched.
	want := `gpudra_plugin_health_events_total{effect="None",kind="xid"} ` + strconv.Itoa(len(health.ApplicationXIDs))
	waitForMetric(t, c.d, want)
	for _, s := range c.d.Pool().Slices {
		for _, d := range s.Devices {
			if len(d.Taints) > 0 {
				t.Errorf("application XIDs tainted %s: %+v", d.Name, d.Taints)
			}
		}
	}
	// A real fault after them still counts.
	inject(t, c.n, 2, nvmlsim.XID(79))
	c.waitForSlices(allTainted(2, 1))
}

func TestAnEvictingFaultReplacesASchedulingOne(t *testing.T) {
	c := startOnCluster(t, newNode(t, "dgx-h100"))
	inject(t, c.n, 2, nvmlsim.XID(74))
	c.waitForSlices(func(devs map[string]resourceapi.Device) bool {
		return len(devs["gpu-2"].Taints) == 1 && devs["gpu-2"].Taints[0].Value == "xid-74"
	})
	inject(t, c.n, 2, nvmlsim.XID(79))
	c.waitForSlices(func(devs map[string]resourceapi.Device) bool {
		return len(devs["gpu-2"].Taints) == 1 && devs["gpu-2"].Taints[0].Effect == resourceapi.DeviceTaintEffectNoExecute
	})
	inject(t, c.n, 2, nvmlsim.XID(74)) // a later, milder fault keeps the evicting taint
	waitForMetric(t, c.d, `gpudra_plugin_health_events_total{effect="NoSchedule",kind="xid"} 2`)
	devs := c.waitForSlices(func(map[string]resourceapi.Device) bool { return true })
	if got := devs["gpu-2"].Taints; len(got) != 1 || got[0].Value != "xid-79" {
		t.Errorf("gpu-2 taints %+v, want only xid-79", got)
	}
}

func TestLostGPUTaintsEveryGPU(t *testing.T) {
	// NVML reports a lost GPU without saying which: all GPUs are suspect.
	c := startOnCluster(t, newNode(t, "dgx-h100"))
	inject(t, c.n, 2, nvmlsim.GPULost)
	devs := c.waitForSlices(func(devs map[string]resourceapi.Device) bool {
		for _, d := range devs {
			if len(d.Taints) == 0 {
				return false
			}
		}
		return true
	})
	if got := devs["gpu-7"].Taints; len(got) != 1 || got[0].Value != "gpu-lost" || got[0].Effect != resourceapi.DeviceTaintEffectNoExecute {
		t.Errorf("gpu-7 taints %+v, want gpu-lost:NoExecute", got)
	}
}

func TestGroupOfTwoUnhealthyGPUsCarriesBothCauses(t *testing.T) {
	c := startOnCluster(t, newNode(t, "dgx-h100"))
	inject(t, c.n, 2, nvmlsim.XID(79))
	inject(t, c.n, 3, nvmlsim.DoubleBitECC)
	devs := c.waitForSlices(func(devs map[string]resourceapi.Device) bool {
		return allTainted(2, 1)(devs) && allTainted(3, 1)(devs)
	})
	for name, d := range devs {
		if usesGPU(d, 2) && usesGPU(d, 3) && len(d.Taints) != 2 {
			t.Errorf("%s uses GPUs 2 and 3: taints %+v, want both causes", name, d.Taints)
		}
	}
}

func TestHealthInjectionFileRaisesEvents(t *testing.T) {
	n := newNode(t, "dgx-h100")
	file := filepath.Join(t.TempDir(), "inject-health")
	c := startOnCluster(t, n, func(cfg *plugin.Config) { cfg.HealthInjectionFile = file })
	if err := os.WriteFile(file, []byte("# lab: break GPU 5\ngpu=5 xid=79\nnot an event\ngpu=6 xid=13\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	devs := c.waitForSlices(allTainted(5, 1))
	if len(devs["gpu-6"].Taints) > 0 {
		t.Errorf("application XID on GPU 6 tainted it")
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(file); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the injection file was not consumed")
		}
	}
}

func TestHealthInjectionNeedsASimulatedBackend(t *testing.T) {
	n := newNode(t, "dgx-h100")
	cfg := n.cfg
	b := *cfg.Backend
	b.Simulated, b.Name = false, "nvml"
	cfg.Backend, cfg.HealthInjectionFile = &b, filepath.Join(t.TempDir(), "inject-health")
	if _, err := plugin.New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "simulated") {
		t.Errorf("got %v, want an error saying injection needs a simulated backend", err)
	}
}

// watchHealth runs WatchHealthStatus as the kubelet does and returns its reports.
func watchHealth(t *testing.T, d *plugin.Driver) <-chan kubeletplugin.DeviceHealthReport {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	reports := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error)
	go func() { done <- d.WatchHealthStatus(ctx, reports) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchHealthStatus: %v", err)
		}
	})
	return reports
}

func healthOf(r kubeletplugin.DeviceHealthReport) map[string]kubeletplugin.DeviceHealth {
	out := map[string]kubeletplugin.DeviceHealth{}
	for _, h := range r.Devices {
		out[h.DeviceName] = h
	}
	return out
}

func TestWatchHealthStatusReportsUnhealthyDevices(t *testing.T) {
	c := startOnCluster(t, newNode(t, "dgx-h100"))
	reports := watchHealth(t, c.d)
	first := healthOf(<-reports)
	published := c.waitForSlices(func(map[string]resourceapi.Device) bool { return true })
	if len(first) != len(published) {
		t.Fatalf("first report covers %d devices, %d are published", len(first), len(published))
	}
	for name, h := range first {
		if h.Health != kubeletplugin.HealthStatusHealthy || h.PoolName != nodeName {
			t.Errorf("%s: %+v, want Healthy in pool %s", name, h, nodeName)
		}
	}
	inject(t, c.n, 2, nvmlsim.XID(79))
	var next map[string]kubeletplugin.DeviceHealth
	select {
	case r := <-reports:
		next = healthOf(r)
	case <-time.After(5 * time.Second):
		t.Fatal("no report after GPU 2 failed")
	}
	for name, h := range next {
		want := kubeletplugin.HealthStatusHealthy
		if usesGPU(published[name], 2) {
			want = kubeletplugin.HealthStatusUnhealthy
			if !strings.Contains(h.Message, "xid-79") {
				t.Errorf("%s: message %q does not name the cause", name, h.Message)
			}
		}
		if h.Health != want {
			t.Errorf("%s: %s, want %s", name, h.Health, want)
		}
	}
}

func TestHealthIsUnknownWhileNotWatched(t *testing.T) {
	n := newNode(t, "dgx-h100")
	d := n.newDriver(nil) // not started: no NVML events are watched
	for name, h := range healthOf(<-watchHealth(t, d)) {
		if h.Health != kubeletplugin.HealthStatusUnknown {
			t.Errorf("%s: %s, want Unknown", name, h.Health)
		}
	}
}

// TestRealGPUHealthIsWatched runs only where real NVML loads (a GPU node): the plugin
// registers for the GPUs' health events, so every device is reported Healthy, not
// Unknown, and nothing is tainted.
func TestRealGPUHealthIsWatched(t *testing.T) {
	b, err := discover.OpenNVML()
	if errors.Is(err, discover.ErrNVMLUnavailable) {
		t.Skipf("no real GPU: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	dir := t.TempDir()
	n := &node{t: t, backend: b, cfg: plugin.Config{
		NodeName: nodeName, Backend: b, DriverRoot: "/",
		CDIRoot: filepath.Join(dir, "cdi"), CheckpointDir: filepath.Join(dir, "checkpoint"),
	}}
	c := startOnCluster(t, n)
	for name, h := range healthOf(<-watchHealth(t, c.d)) {
		if h.Health != kubeletplugin.HealthStatusHealthy {
			t.Errorf("%s: %s (%s), want Healthy", name, h.Health, h.Message)
		}
	}
}

package fragmentation

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	schedcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/simulated"
	"github.com/gpudra/gpudra/scheduler/datalocality"
	"github.com/gpudra/gpudra/topology/placement"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// filterPool has everything a node may publish: DGX H100 nodes with shares, every MIG
// profile and NVLink groups, and an AMD node with XGMI groups.
var filterPool = []placement.NodeSpec{
	{Name: "a-h100", CPU: 64000, Memory: 262144},
	{Name: "b-h100", CPU: 64000, Memory: 262144},
	{Name: "c-mi300x", CPU: 64000, Memory: 262144},
}

func filterSlices(n placement.NodeSpec) ([]*resourceapi.ResourceSlice, error) {
	if n.Name == "c-mi300x" {
		_, rs, err := simulated.KFDSlices("mi300x-8", n.Name, driver.RenderOptions{})
		return rs, err
	}
	_, rs, err := simulated.Slices("dgx-h100", n.Name, driver.RenderOptions{MIG: driver.MIGDynamic})
	return rs, err
}

// filter runs the plugin's PreFilter and Filter for the pod on every node: which nodes it
// lets through, and whether PreFilter skipped the Filter.
func (l *lab) filter(pl *Plugin, pod *corev1.Pod) (passes map[string]bool, skipped bool) {
	cs := framework.NewCycleState()
	_, st := pl.PreFilter(l.ctx, cs, pod, nil)
	passes = map[string]bool{}
	for _, name := range l.names {
		passes[name] = true
		if st.IsSkip() {
			continue
		}
		if !st.IsSuccess() {
			l.t.Fatalf("PreFilter %s: %v", pod.Name, st)
		}
		fst := pl.Filter(l.ctx, cs, pod, l.infos[name])
		switch {
		case fst.Code() == fwk.Unschedulable:
			passes[name] = false
		case !fst.IsSuccess():
			l.t.Fatalf("Filter %s on %s: %v", pod.Name, name, fst)
		}
	}
	if !st.IsSkip() {
		// PreScore reads the GPUs from what PreFilter read: what it reads anew.
		var nodes []fwk.NodeInfo
		for _, name := range l.names {
			nodes = append(nodes, l.infos[name])
		}
		fresh := framework.NewCycleState()
		if a, b := pl.PreScore(l.ctx, cs, pod, nodes), pl.PreScore(l.ctx, fresh, pod, nodes); !a.IsSuccess() || !b.IsSuccess() {
			l.t.Fatalf("PreScore %s: %v, %v", pod.Name, a, b)
		}
		reused, _ := cs.Read(stateKey)
		read, _ := fresh.Read(stateKey)
		if got, want := freeByNode(reused.(*cycleState)), freeByNode(read.(*cycleState)); !reflect.DeepEqual(got, want) {
			l.t.Errorf("pod %s: PreScore after PreFilter sees free GPUs %v, read anew %v", pod.Name, got, want)
		}
	}
	return passes, st.IsSkip()
}

// As nodes fill with every kind of device, a node the real allocator can serve a pod's
// whole GPUs on always passes the Filter; and the Filter does turn down nodes, those with
// too few free GPUs.
func TestFilterNeverTurnsDownANodeTheAllocatorServes(t *testing.T) {
	l := newLabOf(t, filterPool, filterSlices)
	pl := newPlugin(t, l, packingArgs)
	type ask struct {
		class string
		count int
	}
	fills := []ask{
		{api.DeviceClassGPU, 1}, {api.DeviceClassGPU, 2}, {api.DeviceClassShare, 1}, {api.DeviceClassMIG, 1},
		{"gpu-group-2.gpudra.dev", 1}, {api.DeviceClassAMDGPU, 1}, {"gpu-group-4.gpudra.dev", 1}, {api.DeviceClassAnyGPU, 3},
	}
	probes := []ask{
		{api.DeviceClassGPU, 1}, {api.DeviceClassGPU, 3}, {api.DeviceClassGPU, 8},
		{api.DeviceClassAMDGPU, 2}, {api.DeviceClassAnyGPU, 1}, {api.DeviceClassAnyGPU, 4},
	}
	rng := rand.New(rand.NewPCG(7, 30))
	turnedDown, served := 0, 0
	for step := range 40 {
		f, node := fills[rng.IntN(len(fills))], l.names[rng.IntN(len(l.names))]
		p, c := l.classPod(fmt.Sprintf("fill-%d", step), f.class, f.count)
		if _, err := l.states[node].Allocate(l.ctx, node, c); err == nil {
			pod := podOf(p)
			l.claim(pod, c)
			l.bind(pod, c, node)
		}
		for i, probe := range probes {
			p, c := l.classPod(fmt.Sprintf("probe-%d-%d", step, i), probe.class, probe.count)
			pod := podOf(p)
			l.claim(pod, c)
			passes, skipped := l.filter(pl, pod)
			if skipped {
				t.Fatalf("PreFilter skipped %d of %s, a demand of whole GPUs", probe.count, probe.class)
			}
			for _, name := range l.names {
				_, err := l.states[name].Allocate(l.ctx, name, c)
				switch {
				case err == nil && !passes[name]:
					t.Errorf("step %d: the Filter turned down %s for %d of %s, which the allocator serves there", step, name, probe.count, probe.class)
				case err == nil:
					served++
				case !passes[name]:
					turnedDown++
				}
			}
		}
	}
	if turnedDown == 0 || served == 0 {
		t.Errorf("the Filter turned down %d nodes the allocator could not serve, and let through %d it serves: want both", turnedDown, served)
	}
}

// On a node whose GPUs are all taken, a pod that asks for whole GPUs is turned down; one
// whose demand the Filter does not model (a share, a MIG device, a group, admin access,
// no GPU at all) is left to the allocator.
func TestFilterTakesNoViewOfWhatItDoesNotModel(t *testing.T) {
	l := newLabOf(t, filterPool[:1], filterSlices)
	pl := newPlugin(t, l, packingArgs)
	l.pinTo("a-h100", "all", api.DeviceClassGPU, 8)

	p, c := l.classPod("one", api.DeviceClassGPU, 1)
	pod := podOf(p)
	l.claim(pod, c)
	if passes, _ := l.filter(pl, pod); passes["a-h100"] {
		t.Errorf("a one-GPU pod passes the Filter on a node whose 8 GPUs are allocated")
	}

	for i, class := range []string{api.DeviceClassShare, api.DeviceClassMIG, "gpu-group-2.gpudra.dev"} {
		p, c := l.classPod(fmt.Sprintf("other-%d", i), class, 1)
		pod := podOf(p)
		l.claim(pod, c)
		if _, skipped := l.filter(pl, pod); !skipped {
			t.Errorf("a pod asking for %s: PreFilter did not skip the Filter", class)
		}
	}
	p, c = l.classPod("admin", api.DeviceClassGPU, 1)
	c.Spec.Devices.Requests[0].Exactly.AdminAccess = ptr.To(true)
	pod = podOf(p)
	l.claim(pod, c)
	if _, skipped := l.filter(pl, pod); !skipped {
		t.Errorf("a pod asking for admin access to a GPU: PreFilter did not skip the Filter")
	}
	if _, skipped := l.filter(pl, podOf(&placement.Pod{Name: "cpu", CPU: 1000})); !skipped {
		t.Errorf("a pod without devices: PreFilter did not skip the Filter")
	}
}

// In the shipped configuration, gpudra-scheduler's default profile runs GPUFragmentation's
// Filter after kube-scheduler's cheap filters (a pod's node affinity turns most nodes down
// for less) and before the DynamicResources plugin's, and every default filter still runs.
func TestShippedConfigurationFiltersFirst(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	cfg := shippedConfig(t)
	schedmetrics.Register() // the framework counts plugins' calls in kube-scheduler's metrics
	registry := plugins.NewInTreeRegistry()
	if err := registry.Register(Name, New); err != nil {
		t.Fatal(err)
	}
	if err := registry.Register(datalocality.Name, datalocality.New); err != nil {
		t.Fatal(err)
	}
	l := newLab(t, nil)
	client := fake.NewClientset()
	for _, prof := range cfg.Profiles {
		if prof.SchedulerName != "default-scheduler" {
			continue
		}
		fw, err := frameworkruntime.NewFramework(ctx, registry, &prof,
			frameworkruntime.WithClientSet(client),
			frameworkruntime.WithInformerFactory(informers.NewSharedInformerFactory(client, 0)),
			frameworkruntime.WithSharedDRAManager(l.dra),
			frameworkruntime.WithSnapshotSharedLister(schedcache.NewEmptySnapshot()))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range fw.ListPlugins().Filter.Enabled {
			names = append(names, p.Name)
		}
		at := func(name string) int { return slices.Index(names, name) }
		if at(Name) < 0 || at(Name) < at("NodeAffinity") || at(Name) > at("DynamicResources") {
			t.Errorf("profile %s filters with %v, want %s after NodeAffinity and before DynamicResources", prof.SchedulerName, names, Name)
		}
		// Every filter kube-scheduler runs by default still runs.
		for _, want := range []string{"NodeName", "NodeUnschedulable", "TaintToleration", "NodeAffinity", "NodePorts", "NodeResourcesFit",
			"VolumeRestrictions", "NodeVolumeLimits", "VolumeBinding", "VolumeZone", "PodTopologySpread", "InterPodAffinity", "DynamicResources"} {
			if at(want) < 0 {
				t.Errorf("profile %s filters with %v: %s is missing", prof.SchedulerName, names, want)
			}
		}
		return
	}
	t.Fatal("no default-scheduler profile")
}

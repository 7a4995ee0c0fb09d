package fragmentation

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/driver/simulated"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// The scale benchmark runs kube-scheduler's per-pod DRA work in-process, the way its
// DynamicResources plugin does it (pkg/scheduler/framework/plugins/dynamicresources,
// Kubernetes 1.37): PreFilter gathers the allocated state (a copy of every allocated
// device) and builds one structured allocator over all ResourceSlices; Filter asks that
// allocator once per candidate node, visiting nodes round-robin from where the last pod
// stopped until it has found as many feasible nodes as kube-scheduler's adaptive
// percentageOfNodesToScore asks for; the pod goes to the first feasible node and its
// devices count as allocated from the next pod on. gpudra-scheduler adds the
// GPUFragmentation plugin's PreScore and Score over the feasible nodes, and runs its Filter
// before the allocator on each node visited.
//
// The same pods go, interleaved, through clusters that differ only in their slices: plain
// 8-device slices (driver.PlainSlices) and each publication of gpudra's. Times are the
// process's CPU time with GOMAXPROCS 1, so that other work on a shared machine and the
// garbage collector land on the side that caused them.

// scaleVariant is one way the cluster's nodes publish their GPUs.
type scaleVariant struct {
	name string
	// opts renders one node; nil is the plain baseline.
	opts *driver.RenderOptions
	// alter and reorder change what Render made: levers measured before gpudra adopts them.
	alter   func(*resourceapi.Device)
	reorder func([]resourceapi.Device)
}

// scaleVariants are the publications measured against plain slices: gpudra's default
// (whole GPUs, shares, NVLink groups), a training pool's (whole GPUs and NVLink groups),
// and a pool of whole GPUs only (without counters).
func scaleVariants() []scaleVariant {
	published := func(p driver.Publication) *driver.RenderOptions {
		o, err := p.Options(driver.RenderOptions{})
		if err != nil {
			panic(err)
		}
		return &o
	}
	return []scaleVariant{
		{name: "plain"},
		{name: "gpudra", opts: published(driver.PublishAll)},
		{name: "training", opts: published(driver.PublishTraining)},
		{name: "whole", opts: published(driver.PublishWhole)},
		// Levers measured, not adopted: shares and groups with only the attributes their
		// selectors need, and NVLink groups ahead of whole GPUs.
		{name: "gpudra-lean", opts: &driver.RenderOptions{}, alter: leanAttributes},
		{name: "gpudra-groups-first", opts: &driver.RenderOptions{}, reorder: groupsFirst},
	}
}

// groupsFirst moves NVLink groups ahead of the other devices.
func groupsFirst(devs []resourceapi.Device) {
	rank := func(d resourceapi.Device) int {
		if driver.DeviceType(d) == api.TypeNVLinkGroup {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(devs, func(a, b resourceapi.Device) int { return cmp.Compare(rank(a), rank(b)) })
}

// leanAttributes keeps on shares and NVLink groups only the attributes their selectors
// need.
func leanAttributes(d *resourceapi.Device) {
	keep := map[string]bool{api.AttrType: true, api.AttrIndex: true, api.AttrUUID: true, api.AttrProductName: true,
		api.AttrGPUCount: true, api.AttrMembers: true, api.AttrNVLinkMinLinks: true}
	if t := api.DeviceType(d); t != api.TypeShare && t != api.TypeNVLinkGroup {
		return
	}
	for name := range d.Attributes {
		if !keep[string(name)] {
			delete(d.Attributes, name)
		}
	}
}

// scaleFill is the cluster's state before the measured pods: which GPUs are allocated.
type scaleFill struct {
	name string
	// busy says how many of node n's 8 GPUs (counted from gpu-0) are allocated.
	busy func(n, nodes int) int
}

var scaleFills = []scaleFill{
	{"empty", func(n, nodes int) int { return 0 }},
	// kube-scheduler without GPU scoring spreads pods: every node three quarters full.
	{"spread-75", func(n, nodes int) int { return 6 }},
	// gpudra-scheduler packs: three quarters of the nodes full, the rest empty.
	{"packed-75", func(n, nodes int) int {
		if n < nodes*3/4 {
			return 8
		}
		return 0
	}},
}

const scaleGPUsPerNode = 8

// scaleCluster is one variant's cluster and what its pods cost.
type scaleCluster struct {
	variant   scaleVariant
	slices    []*resourceapi.ResourceSlice
	nodes     []*corev1.Node
	infos     []fwk.NodeInfo
	allocated structured.AllocatedState
	dra       *scaleDRA
	plugin    *Plugin
	next      int // kube-scheduler's nextStartNodeIndex
	// CPU time of PreFilter+Filter and of the plugin's PreScore+Score, nodes filtered.
	filter, score time.Duration
	// ownFilter is the CPU time of PreFilter+Filter in gpudra-scheduler, whose
	// GPUFragmentation Filter runs first and spares the allocator the nodes it turns down.
	ownFilter time.Duration
	filtered  int
	pods      int
}

// BenchmarkSchedulingScale measures the scheduler's DRA cost per pod at 1 024 to 4 096
// GPUs on gpudra's slices against plain slices (x-plain: CPU time over the plain
// cluster's), what GPUFragmentation's PreScore and Score add to it (score-x-filter: their
// CPU time over PreFilter+Filter's on the same slices), and what its Filter, which
// gpudra-scheduler runs first, spares (gpudra-filter-x-filter: PreFilter+Filter's CPU time
// in gpudra-scheduler over kube-scheduler's, on the same slices). Each iteration resets the clusters
// to the fill and schedules scaleWindow pods on each, interleaved.
//
//	go test -run '^$' -bench SchedulingScale -benchtime 3x ./scheduler/fragmentation/
func BenchmarkSchedulingScale(b *testing.B) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	klog.SetLogger(ktesting.NewLogger(b, ktesting.NewConfig(ktesting.Verbosity(0))))
	b.Cleanup(klog.ClearLogger)
	ctx := context.Background()
	classes, err := deployments.DeviceClasses()
	if err != nil {
		b.Fatal(err)
	}
	args := shippedArgs(b)
	celCache := cel.NewCache(1000, cel.Features{EnableConsumableCapacity: true})
	shapes := []struct {
		name string
		gpus int
	}{{"1-gpu", 1}, {"8-gpu", 8}}
	for _, nodes := range scaleNodeCounts(b) {
		var clusters []*scaleCluster
		for _, v := range scaleVariants() {
			clusters = append(clusters, newScaleCluster(b, ctx, v, nodes, classes, args))
		}
		for _, shape := range shapes {
			for _, fill := range scaleFills {
				if shape.gpus == scaleGPUsPerNode && fill.name == "spread-75" {
					continue // no node has room for 8 GPUs
				}
				b.Run(fmt.Sprintf("gpus=%d/nodes=%d/%s/%s", nodes*scaleGPUsPerNode, nodes, shape.name, fill.name), func(b *testing.B) {
					for _, c := range clusters {
						c.filter, c.ownFilter, c.score, c.filtered, c.pods = 0, 0, 0, 0, 0
					}
					seq := 0
					for b.Loop() {
						for _, c := range clusters {
							c.reset(fill, nodes)
						}
						for range scaleWindow {
							seq++
							for _, c := range clusters {
								c.schedule(b, ctx, celCache, classes, seq, shape.gpus)
							}
						}
					}
					plain := clusters[0]
					for _, c := range clusters {
						perPod := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(c.pods) }
						b.ReportMetric(perPod(c.filter), c.variant.name+"-us/pod")
						if c != plain {
							b.ReportMetric(float64(c.filter)/float64(plain.filter), c.variant.name+"-x-plain")
						}
						b.ReportMetric(float64(c.score)/float64(c.filter), c.variant.name+"-score-x-filter")
						b.ReportMetric(float64(c.ownFilter)/float64(c.filter), c.variant.name+"-gpudra-filter-x-filter")
					}
					b.ReportMetric(float64(plain.filtered)/float64(plain.pods), "nodes-filtered/pod")
				})
			}
		}
	}
}

// scaleWindow is how many pods each iteration schedules on each cluster.
const scaleWindow = 16

// scaleNodeCounts are the cluster sizes: 128, 400 and 512 nodes of 8 GPUs, or the
// comma-separated node counts in GPUDRA_SCALE_NODES.
func scaleNodeCounts(b *testing.B) []int {
	env := os.Getenv("GPUDRA_SCALE_NODES")
	if env == "" {
		return []int{128, 400, 512}
	}
	var out []int
	for _, f := range strings.Split(env, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("GPUDRA_SCALE_NODES=%q: want comma-separated node counts such as 128,512", env)
		}
		out = append(out, n)
	}
	return out
}

func newScaleCluster(b *testing.B, ctx context.Context, v scaleVariant, nodes int, classes []*resourceapi.DeviceClass, args apiruntime.Object) *scaleCluster {
	c := &scaleCluster{variant: v}
	// Every node has the same GPUs; each publishes them in a pool of its own.
	inv, err := simulated.Inventory("dgx-h100", "node")
	if err != nil {
		b.Fatal(err)
	}
	for n := range nodes {
		name := fmt.Sprintf("node-%04d", n)
		var rs []*resourceapi.ResourceSlice
		if v.opts == nil {
			rs, err = driver.PlainSlices(inv, name)
		} else {
			var pool *driver.Pool
			if pool, err = driver.Render(inv, *v.opts); err == nil {
				rs = pool.ResourceSlices(name, 1)
			}
		}
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range rs {
			s.ResourceVersion = "1"
			for k := range s.Spec.Devices {
				if v.alter != nil {
					v.alter(&s.Spec.Devices[k])
				}
			}
			if v.reorder != nil {
				v.reorder(s.Spec.Devices)
			}
		}
		c.slices = append(c.slices, rs...)
		alloc := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("224"),
			corev1.ResourceMemory: resource.MustParse("2Ti"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
			Status: corev1.NodeStatus{Allocatable: alloc, Capacity: alloc}}
		ni := framework.NewNodeInfo()
		ni.SetNode(node)
		c.nodes = append(c.nodes, node)
		c.infos = append(c.infos, ni)
	}
	c.dra = &scaleDRA{slices: c.slices, classes: classLister(classes), claims: map[string]*resourceapi.ResourceClaim{}, state: &c.allocated}
	p, err := New(ctx, args, handle{dra: c.dra})
	if err != nil {
		b.Fatal(err)
	}
	c.plugin = p.(*Plugin)
	// kube-scheduler's plugin has read every slice once when the slices were published;
	// the benchmark measures the cycles after that.
	if _, err := c.plugin.gpusOf(sets.New[string]()); err != nil {
		b.Fatal(err)
	}
	return c
}

// reset allocates the fill's GPUs (whole, from gpu-0) and nothing else.
func (c *scaleCluster) reset(fill scaleFill, nodes int) {
	c.allocated = structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for n, node := range c.nodes {
		for g := range fill.busy(n, nodes) {
			c.allocated.AllocatedDevices.Insert(structured.MakeDeviceID(api.DriverName, node.Name, driver.GPUDeviceName(g)))
		}
	}
	clear(c.dra.claims)
	c.next = 0
}

// schedule runs one pod asking for gpus whole GPUs through PreFilter, Filter, PreScore
// and Score, and allocates its claim on the first feasible node.
func (c *scaleCluster) schedule(b *testing.B, ctx context.Context, celCache *cel.Cache, classes []*resourceapi.DeviceClass, seq, gpus int) {
	claim := scaleClaim(seq, gpus)
	c.dra.claims[claim.Name] = claim
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: claim.Name, Namespace: claim.Namespace, UID: types.UID("pod-" + claim.Name)},
		Spec:       corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claim.Name}}},
	}
	start := cpuTime()
	// PreFilter.
	state := c.dra.gather()
	alloc, err := structured.NewAllocator(ctx, allocation.Features, *state, classLister(classes), c.slices, celCache)
	if err != nil {
		b.Fatal(err)
	}
	// Filter.
	want := numFeasibleNodesToFind(len(c.nodes))
	var feasible []fwk.NodeInfo
	var first []resourceapi.AllocationResult
	visited := 0
	for visited < len(c.nodes) && len(feasible) < want {
		k := (c.next + visited) % len(c.nodes)
		visited++
		res, err := alloc.Allocate(ctx, c.nodes[k], []*resourceapi.ResourceClaim{claim})
		if err != nil {
			b.Fatal(err)
		}
		if res == nil {
			continue
		}
		if first == nil {
			first = res
		}
		feasible = append(feasible, c.infos[k])
	}
	mid := cpuTime()
	c.filter += mid - start
	// The same in gpudra-scheduler: GPUFragmentation's PreFilter beside the DynamicResources
	// plugin's, and on the same nodes its Filter first, the allocator only where it passes.
	state = c.dra.gather()
	if alloc, err = structured.NewAllocator(ctx, allocation.Features, *state, classLister(classes), c.slices, celCache); err != nil {
		b.Fatal(err)
	}
	fcs := framework.NewCycleState()
	_, pst := c.plugin.PreFilter(ctx, fcs, pod, nil)
	found := 0
	for v := range visited {
		k := (c.next + v) % len(c.nodes)
		if !pst.IsSkip() && !c.plugin.Filter(ctx, fcs, pod, c.infos[k]).IsSuccess() {
			continue
		}
		res, err := alloc.Allocate(ctx, c.nodes[k], []*resourceapi.ResourceClaim{claim})
		if err != nil {
			b.Fatal(err)
		}
		if res != nil {
			found++
		}
	}
	own := cpuTime()
	c.ownFilter += own - mid
	if found != len(feasible) {
		b.Fatalf("%s: pod %d fits %d of the nodes visited, %d once GPUFragmentation's Filter turned some down", c.variant.name, seq, len(feasible), found)
	}
	c.next = (c.next + visited) % len(c.nodes)
	mid = cpuTime()
	if len(feasible) > 0 {
		cs := framework.NewCycleState()
		if st := c.plugin.PreScore(ctx, cs, pod, feasible); !st.IsSuccess() {
			b.Fatal(st)
		}
		for _, ni := range feasible {
			if _, st := c.plugin.Score(ctx, cs, pod, ni); !st.IsSuccess() {
				b.Fatal(st)
			}
		}
	}
	end := cpuTime()
	c.score += end - mid
	c.filtered += visited
	c.pods++
	if first == nil {
		b.Fatalf("%s: pod %d found no node", c.variant.name, seq)
	}
	for _, d := range first[0].Devices.Results {
		c.allocated.AllocatedDevices.Insert(structured.MakeDeviceID(d.Driver, d.Pool, d.Device))
	}
	delete(c.dra.claims, claim.Name)
}

// numFeasibleNodesToFind is kube-scheduler's adaptive percentageOfNodesToScore (its
// default): every node below 100 nodes, else 50 % less 1 % per 125 nodes (at least 5 %),
// and at least 100 nodes.
func numFeasibleNodesToFind(nodes int) int {
	if nodes < 100 {
		return nodes
	}
	pct := max(50-nodes/125, 5)
	return max(nodes*pct/100, 100)
}

func scaleClaim(seq, gpus int) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d-gpu", seq), Namespace: "default", UID: types.UID(fmt.Sprintf("claim-%d", seq))},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: "gpu.gpudra.dev",
				AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
				Count:           int64(gpus),
			},
		}}}},
	}
	return c
}

// cpuTime is the CPU time this process has used.
func cpuTime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		panic(err)
	}
	return time.Duration(ts.Nano())
}

// shippedArgs are GPUFragmentation's args in the shipped scheduler configuration.
func shippedArgs(b *testing.B) apiruntime.Object {
	for _, prof := range shippedConfig(b).Profiles {
		for _, pc := range prof.PluginConfig {
			if pc.Name == Name {
				return pc.Args
			}
		}
	}
	b.Fatalf("the shipped configuration has no %s args", Name)
	return nil
}

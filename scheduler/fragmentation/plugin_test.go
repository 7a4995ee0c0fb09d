package fragmentation

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache"
	resourceslicetracker "k8s.io/dynamic-resource-allocation/resourceslice/tracker"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/util/assumecache"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/sim"
	"github.com/gpudra/gpudra/sim/reproduction"
	"github.com/gpudra/gpudra/topology/placement"
)

// lab is a scheduler's view of a small cluster: the real DRA manager kube-scheduler
// builds (informers over a fake API), and one allocation.State per node standing in for
// the DynamicResources plugin's allocation at bind time.
type lab struct {
	t      testing.TB
	ctx    context.Context
	client *fake.Clientset
	dra    fwk.SharedDRAManager
	infos  map[string]*framework.NodeInfo
	states map[string]*allocation.State
	names  []string
}

func newLab(t testing.TB, nodes []placement.NodeSpec) *lab {
	return newLabOf(t, nodes, sim.Slices)
}

// newLabOf is newLab with the nodes' slices from slicesOf (a node's CPU and memory come
// from its spec).
func newLabOf(t testing.TB, nodes []placement.NodeSpec, slicesOf func(placement.NodeSpec) ([]*resourceapi.ResourceSlice, error)) *lab {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	classes, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	l := &lab{t: t, ctx: ctx, client: fake.NewClientset(), infos: map[string]*framework.NodeInfo{}, states: map[string]*allocation.State{}}
	for _, c := range classes {
		if _, err := l.client.ResourceV1().DeviceClasses().Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		rs, err := slicesOf(n)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range rs {
			s.ResourceVersion = "1" // as the API server would set it (the fake API does not)
			if _, err := l.client.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		l.states[n.Name] = allocation.New(classes, rs)
		alloc := corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewMilliQuantity(n.CPU, resource.DecimalSI),
			corev1.ResourceMemory: resource.MustParse(strconv.FormatInt(n.Memory, 10) + "Mi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}, Status: corev1.NodeStatus{Allocatable: alloc, Capacity: alloc}}
		ni := framework.NewNodeInfo()
		ni.SetNode(node)
		l.infos[n.Name] = ni
		l.names = append(l.names, n.Name)
	}
	inf := informers.NewSharedInformerFactory(l.client, 0)
	claims := assumecache.NewAssumeCache(klog.FromContext(ctx), inf.Resource().V1().ResourceClaims().Informer(), "ResourceClaim", "", nil)
	tracker, err := resourceslicetracker.StartTracker(ctx, resourceslicetracker.Options{
		EnableConsumableCapacity: true, SliceInformer: inf.Resource().V1().ResourceSlices(), KubeClient: l.client,
	})
	if err != nil {
		t.Fatal(err)
	}
	l.dra = dynamicresources.NewDRAManager(ctx, claims, tracker, inf)
	// kube-scheduler keeps the manager's extended-resource cache up to date from the
	// DeviceClass informer (its DeviceClass event handler).
	classEvents, err := inf.Resource().V1().DeviceClasses().Informer().AddEventHandler(l.dra.DeviceClassResolver().(*extendedresourcecache.ExtendedResourceCache))
	if err != nil {
		t.Fatal(err)
	}
	inf.Start(ctx.Done())
	inf.WaitForCacheSync(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), classEvents.HasSynced) {
		t.Fatal("the extended-resource cache did not see the DeviceClasses")
	}
	return l
}

// handle is the part of the framework handle the plugin uses.
type handle struct {
	fwk.Handle
	dra fwk.SharedDRAManager
}

func (h handle) SharedDRAManager() fwk.SharedDRAManager { return h.dra }

func newPlugin(t testing.TB, l *lab, args Args) *Plugin {
	raw, err := yaml.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(l.ctx, &runtime.Unknown{Raw: raw, ContentType: runtime.ContentTypeYAML}, handle{dra: l.dra})
	if err != nil {
		t.Fatal(err)
	}
	return p.(*Plugin)
}

// submit creates the pod's claim as a user writes it (sim.Claim) and returns the pod.
func (l *lab) submit(p *placement.Pod, uid int64) *corev1.Pod {
	pod := podOf(p)
	claim, err := sim.Claim(p, nil, uid)
	if err != nil {
		l.t.Fatal(err)
	}
	if claim != nil {
		l.claim(pod, claim)
	}
	return pod
}

// podOf is the pod of p without its GPUs: one container asking for its CPU and memory.
func podOf(p *placement.Pod) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: "default", UID: types.UID("pod-" + p.Name)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewMilliQuantity(p.CPU, resource.DecimalSI),
			corev1.ResourceMemory: resource.MustParse(strconv.FormatInt(p.Memory, 10) + "Mi"),
		}}}}},
	}
}

// claim creates the claim in the API, waits until the scheduler's claim cache has it, and
// makes it the pod's.
func (l *lab) claim(pod *corev1.Pod, claim *resourceapi.ResourceClaim) {
	claim.ResourceVersion = "1" // the fake API does not set one; the scheduler's claim cache needs it
	if _, err := l.client.ResourceV1().ResourceClaims("default").Create(l.ctx, claim, metav1.CreateOptions{}); err != nil {
		l.t.Fatal(err)
	}
	l.waitFor(func() bool { _, err := l.dra.ResourceClaims().Get("default", claim.Name); return err == nil })
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claim.Name}}
}

func (l *lab) waitFor(cond func() bool) {
	if err := wait.PollUntilContextTimeout(l.ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		l.t.Fatal(err)
	}
}

// feasible is what filtering leaves: CPU and memory fit (NodeResourcesFit) and the real
// allocator can allocate the claim there (DynamicResources).
func (l *lab) feasible(pod *corev1.Pod, claim *resourceapi.ResourceClaim) []fwk.NodeInfo {
	var out []fwk.NodeInfo
	for _, name := range l.names {
		ni := l.infos[name]
		cpu, mem := pod.Spec.Containers[0].Resources.Requests.Cpu().MilliValue(), pod.Spec.Containers[0].Resources.Requests.Memory().Value()
		if ni.Allocatable.MilliCPU-ni.Requested.MilliCPU < cpu || ni.Allocatable.Memory-ni.Requested.Memory < mem {
			continue
		}
		if claim != nil {
			if _, err := l.states[name].Allocate(l.ctx, name, claim); err != nil {
				continue
			}
		}
		out = append(out, ni)
	}
	return out
}

// schedule runs the plugin's PreScore, Score and NormalizeScore over the feasible nodes
// and returns the winner ("" when none is feasible).
func (l *lab) schedule(pl *Plugin, pod *corev1.Pod, claim *resourceapi.ResourceClaim) (string, *cycleState) {
	nodes := l.feasible(pod, claim)
	if len(nodes) == 0 {
		return "", nil
	}
	cs := framework.NewCycleState()
	if st := pl.PreScore(l.ctx, cs, pod, nodes); !st.IsSuccess() {
		l.t.Fatalf("PreScore %s: %v", pod.Name, st)
	}
	scores := make(fwk.NodeScoreList, len(nodes))
	for i, ni := range nodes {
		s, st := pl.Score(l.ctx, cs, pod, ni)
		if !st.IsSuccess() {
			l.t.Fatalf("Score %s on %s: %v", pod.Name, ni.Node().Name, st)
		}
		scores[i] = fwk.NodeScore{Name: ni.Node().Name, Score: s}
	}
	if st := pl.NormalizeScore(l.ctx, cs, pod, scores); !st.IsSuccess() {
		l.t.Fatal(st)
	}
	best := slices.MaxFunc(scores, func(a, b fwk.NodeScore) int { return int(a.Score - b.Score) })
	if n := slices.IndexFunc(scores, func(s fwk.NodeScore) bool { return s.Score == best.Score }); scores[n].Name != best.Name {
		l.t.Fatalf("pod %s: two nodes share the top score %d after NodeName tie-break: %v", pod.Name, best.Score, scores)
	}
	data, _ := cs.Read(stateKey)
	return best.Name, data.(*cycleState)
}

// bind allocates the claim on the node with the real allocator, writes the allocation
// to the API as the scheduler does, and accounts the pod on the node; it returns the
// GPUs the allocator chose.
func (l *lab) bind(pod *corev1.Pod, claim *resourceapi.ResourceClaim, node string) []int {
	pod = pod.DeepCopy()
	pod.Spec.NodeName = node
	l.infos[node].AddPod(pod)
	if claim == nil {
		return nil
	}
	res, err := l.states[node].AllocateAndCommit(l.ctx, node, claim)
	if err != nil {
		l.t.Fatalf("allocate %s on %s: %v", claim.Name, node, err)
	}
	c, err := l.client.ResourceV1().ResourceClaims("default").Get(l.ctx, claim.Name, metav1.GetOptions{})
	if err != nil {
		l.t.Fatal(err)
	}
	c.Status.Allocation = &res[0]
	c.ResourceVersion = "2"
	if _, err := l.client.ResourceV1().ResourceClaims("default").UpdateStatus(l.ctx, c, metav1.UpdateOptions{}); err != nil {
		l.t.Fatal(err)
	}
	// The scheduler's allocated-device index follows the claim cache through an event
	// handler of its own: wait until it holds every device of the allocation.
	l.waitFor(func() bool {
		st, err := l.dra.ResourceClaims().GatherAllocatedState()
		if err != nil {
			return false
		}
		for _, d := range res[0].Devices.Results {
			id := structured.MakeDeviceID(d.Driver, d.Pool, d.Device)
			if d.ShareID != nil && !st.AllocatedSharedDeviceIDs.Has(structured.MakeSharedDeviceID(id, d.ShareID)) ||
				d.ShareID == nil && !st.AllocatedDevices.Has(id) {
				return false
			}
		}
		return true
	})
	var gpus []int
	for _, d := range res[0].Devices.Results {
		name := strings.TrimSuffix(d.Device, "-share")
		_, idx, _ := strings.Cut(name, "-") // gpu-3, nvlink-0-1, xgmi-0-1-2-3, gpu-4-mig-1g10gb-0
		n := len(gpus)
		for _, s := range strings.Split(idx, "-") {
			i, err := strconv.Atoi(s)
			if err != nil {
				break
			}
			gpus = append(gpus, i)
		}
		if len(gpus) == n {
			l.t.Fatalf("device %s", d.Device)
		}
	}
	slices.Sort(gpus)
	return gpus
}

var replayArgs = Args{TieBreak: TieBreakNodeName, TypicalPods: []TypicalPod{
	{CPU: resource.MustParse("4"), Memory: resource.MustParse("16Gi"), GPUs: 1, GPUMilli: 1000, Count: 30},
	{CPU: resource.MustParse("2"), Memory: resource.MustParse("8Gi"), GPUs: 1, GPUMilli: 500, Count: 25},
	{CPU: resource.MustParse("8"), GPUs: 2, GPUMilli: 1000, Count: 10},
	{CPU: resource.MustParse("1"), GPUs: 1, GPUMilli: 250, Count: 15},
	{CPU: resource.MustParse("16"), GPUs: 8, GPUMilli: 1000, Count: 5, ProductNames: []string{"Tesla V100-SXM2-32GB"}},
	{CPU: resource.MustParse("4"), Count: 15},
}}

// replayPods is a small trace: shares, whole GPUs and CPU pods, more than fits.
func replayPods() []placement.Pod {
	shapes := []placement.Pod{
		{CPU: 2000, Memory: 4096, GPUs: 1, GPUMilli: 500},
		{CPU: 4000, Memory: 8192, GPUs: 1, GPUMilli: 1000},
		{CPU: 1000, Memory: 2048, GPUs: 1, GPUMilli: 250},
		{CPU: 8000, Memory: 16384, GPUs: 2, GPUMilli: 1000},
		{CPU: 6000, Memory: 4096},
		{CPU: 1000, Memory: 2048, GPUs: 1, GPUMilli: 300},
		{CPU: 2000, Memory: 4096, GPUs: 1, GPUMilli: 700},
	}
	var out []placement.Pod
	for i := range 40 {
		p := shapes[(i*5+i/7)%len(shapes)]
		p.Name = fmt.Sprintf("p%02d", i)
		out = append(out, p)
	}
	return out
}

var replayNodes = []placement.NodeSpec{
	{Name: "node-a", CPU: 32000, Memory: 131072, GPUs: 4, Model: "T4"},
	{Name: "node-b", CPU: 64000, Memory: 262144, GPUs: 8, Model: "V100M32"},
	{Name: "node-c", CPU: 16000, Memory: 65536, GPUs: 2, Model: "T4"},
	{Name: "node-d", CPU: 24000, Memory: 65536},
}

// TestPluginPlacesLikeTheSimulator replays a small trace through the plugin, over the
// scheduler's real DRA manager and the real allocator, and through the simulator's
// scheduler with the same policy: every pod must land on the same node, and the plugin
// must see each node's GPUs exactly as the simulator accounts them.
func TestPluginPlacesLikeTheSimulator(t *testing.T) {
	l := newLab(t, replayNodes)
	pl := newPlugin(t, l, replayArgs)

	var simNodes []*placement.Node
	for i, spec := range replayNodes { // already in name order: rank = position
		if spec.GPUs > 0 {
			m, err := placement.ModelByCode(spec.Model)
			if err != nil {
				t.Fatal(err)
			}
			spec.Model = m.ProductName // the plugin knows GPUs by their productName
		}
		simNodes = append(simNodes, placement.NewNode(spec, i))
	}
	simPolicy, err := reproduction.NewPolicy(placement.GpudraName, reproduction.Setup{Typical: replayArgs.Pods()})
	if err != nil {
		t.Fatal(err)
	}
	simSched := reproduction.NewScheduler(simNodes, simPolicy, nil)
	byName := map[string]*placement.Node{}
	for _, n := range simNodes {
		byName[n.Name] = n
	}

	placed, notFirst := 0, 0
	for k, p := range replayPods() {
		pod := l.submit(&p, int64(k))
		var claim *resourceapi.ResourceClaim
		if len(pod.Spec.ResourceClaims) > 0 {
			claim, _ = l.dra.ResourceClaims().Get("default", *pod.Spec.ResourceClaims[0].ResourceClaimName)
		}
		got, st := l.schedule(pl, pod, claim)
		want, ok := simSched.Best(&p, nil)
		if !ok {
			if got != "" {
				t.Fatalf("pod %s: the plugin placed it on %s, the simulator found no node", p.Name, got)
			}
			continue
		}
		if wantName := simNodes[want.Node].Name; got != wantName {
			t.Fatalf("pod %s (%+v): plugin chose %q, simulator %q", p.Name, p, got, wantName)
		}
		for name, g := range st.nodes {
			if !slices.Equal(g.free, byName[name].GPUFree) {
				t.Fatalf("pod %s: plugin sees node %s's GPUs free %v, the simulator %v", p.Name, name, g.free, byName[name].GPUFree)
			}
		}
		if got != l.names[0] {
			notFirst++
		}
		gpus := l.bind(pod, claim, got)
		if !slices.Equal(gpus, want.GPUs) {
			t.Fatalf("pod %s: the allocator took GPUs %v on %s, the policy expected first fit %v", p.Name, gpus, got, want.GPUs)
		}
		if err := byName[got].Place(&p, gpus); err != nil {
			t.Fatal(err)
		}
		placed++
	}
	if placed < 20 || notFirst < 5 {
		t.Fatalf("the replay decided too little to prove anything: %d pods placed, %d not on the first node by name", placed, notFirst)
	}
	t.Logf("%d pods placed identically, %d of them not on the first node by name", placed, notFirst)
}

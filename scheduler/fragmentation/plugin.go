package fragmentation

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/gpudra/gpudra/topology/placement"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "GPUFragmentation"

const stateKey fwk.StateKey = Name

// Plugin scores nodes with gpudra's placement policy: FGD's fragmentation gradient for
// the GPUs the DRA allocator's first fit will take on the node.
type Plugin struct {
	dra      fwk.SharedDRAManager
	tieBreak string
	layouts  layouts
	// typical are the typical pods as FGD weighs them (placement scoring).
	typical []placement.TypicalPod
	// policies are placement policies built over the typical pods; a policy keeps
	// scratch space, so each concurrent Score call takes its own.
	policies sync.Pool
}

var (
	_ fwk.PreFilterPlugin            = (*Plugin)(nil)
	_ fwk.FilterPlugin               = (*Plugin)(nil)
	_ fwk.EnqueueExtensions          = (*Plugin)(nil)
	_ fwk.PreScorePlugin             = (*Plugin)(nil)
	_ fwk.ScorePlugin                = (*Plugin)(nil)
	_ fwk.ScoreExtensions            = (*Plugin)(nil)
	_ frameworkruntime.PluginFactory = New
)

// New builds the plugin from its args; it needs the DRA manager kube-scheduler gives
// plugins when the DynamicResourceAllocation feature is on (the default).
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	var args Args
	if err := frameworkruntime.DecodeInto(obj, &args); err != nil {
		return nil, fmt.Errorf("%s args: %w", Name, err)
	}
	if err := args.Validate(); err != nil {
		return nil, fmt.Errorf("%s args: %w", Name, err)
	}
	dra := h.SharedDRAManager()
	if dra == nil {
		return nil, fmt.Errorf("%s needs dynamic resource allocation (feature DynamicResourceAllocation) enabled", Name)
	}
	pods := args.Pods()
	p := &Plugin{dra: dra, tieBreak: args.TieBreak, typical: placement.TypicalPods(pods)}
	p.policies.New = func() any { return placement.NewGpudra(pods) }
	klog.FromContext(ctx).Info("GPU fragmentation scoring", "typicalPodShapes", len(args.TypicalPods), "tieBreak", args.TieBreak)
	return p, nil
}

func (*Plugin) Name() string { return Name }

// cycleState is what PreScore learned for one pod.
type cycleState struct {
	pod placement.Pod
	// offered is the pod on the nodes that offer one of its DRA-backed extended
	// resources themselves (device-plugin nodes), where it asks for fewer devices.
	offered map[string]placement.Pod
	nodes   map[string]*nodeGPUs
}

func (s *cycleState) Clone() fwk.StateData { return s }

// PreScore reads the pod's GPU demand — its claims and the claim kube-scheduler makes for
// its DRA-backed extended resources — and the candidate nodes' GPUs once per cycle. Pods
// asking for gpudra devices the policies do not model are left to the other plugins.
func (p *Plugin) PreScore(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	// What PreFilter read for the Filter, if it took a view: the pod's demand and the
	// state the nodes were filtered on.
	var filtered *filterState
	if fs, err := cs.Read(filterStateKey); err == nil {
		filtered = fs.(*filterState)
	}
	var d *demand
	if filtered != nil {
		d = filtered.demand
	} else {
		var err error
		if d, err = readDemand(pod, p.dra.ResourceClaims(), p.dra.DeviceClassResolver()); err != nil {
			return fwk.AsStatus(err)
		}
	}
	s := &cycleState{}
	var ok bool
	if s.pod, ok = d.on(nil); !ok {
		return fwk.NewStatus(fwk.Skip)
	}
	names := sets.New[string]()
	for _, n := range nodes {
		name := n.Node().Name
		names.Insert(name)
		if alloc := n.GetAllocatable().GetScalarResources(); d.offeredBy(alloc) {
			if s.offered == nil {
				s.offered = map[string]placement.Pod{}
			}
			s.offered[name], _ = d.on(alloc) // fewer devices than a modelled demand: modelled
		}
	}
	if filtered != nil {
		s.nodes = layoutsFree(filtered.byNode, filtered.allocated, names)
	} else {
		var err error
		if s.nodes, err = p.gpusOf(names); err != nil {
			return fwk.AsStatus(err)
		}
	}
	// On a node with GPUs of several vendors, the pod sees those its classes take.
	for _, n := range nodes {
		if g, ok := s.nodes[n.Node().Name]; ok {
			s.nodes[n.Node().Name] = g.of(d.vendorsOn(n.GetAllocatable().GetScalarResources()))
		}
	}
	cs.Write(stateKey, s)
	return nil
}

// gpusOf is the GPUs of the named nodes as the DRA manager sees them now: gpudra's
// ResourceSlices less what allocated and pending claims hold.
func (p *Plugin) gpusOf(nodes sets.Set[string]) (map[string]*nodeGPUs, error) {
	slices, err := p.dra.ResourceSlices().ListWithDeviceTaintRules()
	if err != nil {
		return nil, fmt.Errorf("list ResourceSlices: %w", err)
	}
	allocated, err := p.dra.ResourceClaims().GatherAllocatedState()
	if err != nil {
		return nil, fmt.Errorf("allocated devices: %w", err)
	}
	return p.layouts.gpusByNode(slices, allocated, nodes), nil
}

// Score is the policy's score for the node, 0 (worst) to 100: how little placing the pod
// on the GPUs first fit takes there raises the node's expected unusable GPU capacity.
func (p *Plugin) Score(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	data, err := cs.Read(stateKey)
	if err != nil {
		return 0, fwk.AsStatus(fmt.Errorf("%s: PreScore state: %w", Name, err))
	}
	s := data.(*cycleState)
	name := ni.Node().Name
	demand := s.pod
	if q, ok := s.offered[name]; ok {
		demand = q
	}
	n := nodeOf(ni, s.nodes[name])
	if !n.Fits(&demand) {
		// Filtering let it through (the model counts only CPU, memory and GPUs); the
		// policy has no opinion on a node it would not have chosen.
		return fwk.MinNodeScore, nil
	}
	policy := p.policies.Get().(placement.Policy)
	defer p.policies.Put(policy)
	return min(max(policy.Score(n, &demand).Score, fwk.MinNodeScore), fwk.MaxNodeScore), nil
}

// nodeOf is the node as the placement policies see it (read only: policies score, they
// do not place).
func nodeOf(ni fwk.NodeInfo, gpus *nodeGPUs) *placement.Node {
	alloc, used := ni.GetAllocatable(), ni.GetRequested()
	n := &placement.Node{
		NodeSpec:   placement.NodeSpec{Name: ni.Node().Name, CPU: alloc.GetMilliCPU(), Memory: alloc.GetMemory() >> 20},
		CPUFree:    alloc.GetMilliCPU() - used.GetMilliCPU(),
		MemoryFree: (alloc.GetMemory() - used.GetMemory()) >> 20,
		Pods:       len(ni.GetPods()),
	}
	if gpus != nil {
		n.Model, n.GPUs, n.GPUFree = gpus.model, len(gpus.free), gpus.free
	}
	return n
}

func (p *Plugin) ScoreExtensions() fwk.ScoreExtensions { return p }

// NormalizeScore leaves scores as they are for the Random tie-break (kube-scheduler
// chooses among equal totals at random). With NodeName, the first node by name among the
// best gets the maximum and every other node at most one less, so the choice is
// reproducible when this plugin is the only one scoring.
func (p *Plugin) NormalizeScore(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	if p.tieBreak != TieBreakNodeName || len(scores) == 0 {
		return nil
	}
	best := 0
	for i := range scores {
		if scores[i].Score > scores[best].Score || scores[i].Score == scores[best].Score && scores[i].Name < scores[best].Name {
			best = i
		}
	}
	for i := range scores {
		if i == best {
			scores[i].Score = fwk.MaxNodeScore
		} else {
			scores[i].Score = min(scores[i].Score, fwk.MaxNodeScore-1)
		}
	}
	return nil
}

var _ fwk.SignPlugin = (*Plugin)(nil)

// signerName is the key of the plugin's signature fragment: what it scores a pod without
// devices by (its CPU and memory requests).
const signerName = "v1.Pod.Spec.ContainerRequestsAndOverheads().GPUFragmentation()"

// SignPod lets kube-scheduler 1.37 reuse scores across pods that are alike (opportunistic
// batching): a pod without devices is scored by its CPU and memory requests alone. A pod
// with claims, or with extended resources a DeviceClass backs, depends on its devices
// and their state, so it is not signable (as the DynamicResources plugin says of claims
// and NodeResourcesFit of DRA-backed extended resources).
func (p *Plugin) SignPod(ctx context.Context, pod *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	if len(pod.Spec.ResourceClaims) > 0 {
		return nil, fwk.NewStatus(fwk.Unschedulable, "pods with resource claims are not signable: their GPU score depends on the claims")
	}
	req := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	if ext := extendedRequests(req, p.dra.DeviceClassResolver()); len(ext) > 0 {
		return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("pods with DRA-backed extended resources are not signable: their GPU score depends on the devices of DeviceClass %s", ext[0].devices.DeviceClassName))
	}
	return []fwk.SignFragment{{Key: signerName, Value: [2]int64{req.Cpu().MilliValue(), req.Memory().Value()}}}, nil
}

package fragmentation

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpudra/gpudra/topology/placement"
)

// The plugin's Filter turns down a node that has fewer free whole GPUs than a pod asks
// for, before the DynamicResources plugin's Filter runs the DRA allocator there. The
// allocator reaches the same answer, but dearly on a node whose GPUs are all taken: it
// skips the allocated whole GPUs by name, then evaluates the DeviceClass selector of each
// share, MIG device and NVLink group before their counters turn it down. A bin-packing
// scheduler fills nodes, and on a packed cluster most candidate nodes are full.
//
// The check is looser than the allocator, never stricter: it counts a GPU as free when
// no allocated device uses it and no share reserves part of it (gpudra's shares, MIG
// devices and groups consume the counters of the GPUs they use, so the allocator cannot
// give such a GPU whole), and it takes no view where the pod's demand is not whole GPUs
// of gpudra's classes the policies model, where a request has admin access (which may
// take allocated devices), on a node that offers the pod's extended resources itself,
// or on a node of which it knows no gpudra ResourceSlice.

const filterStateKey fwk.StateKey = Name + "/filter"

// reasonTooFewGPUs is the same for every node, so that kube-scheduler's FailedScheduling
// message counts the nodes it turned down together.
const reasonTooFewGPUs = "too few free whole GPUs for the pod's claims"

// filterState is what PreFilter learned for one pod.
type filterState struct {
	demand *demand
	// gpus is how many whole GPUs the pod asks for on a node that offers none of its
	// extended resources itself; vendors are the vendors they may be of (nil: any).
	gpus    int
	vendors []string
	// byNode and allocated are the ResourceSlices' GPUs and the allocated devices when
	// the cycle began, as the DynamicResources plugin reads them for its allocator.
	byNode    map[string][]*sliceLayout
	allocated *structured.AllocatedState
}

func (s *filterState) Clone() fwk.StateData { return s }

// PreFilter reads the pod's demand and, for a pod that asks for whole GPUs only, the
// cluster's GPUs; it skips Filter for every other pod.
func (p *Plugin) PreFilter(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	d, err := readDemand(pod, p.dra.ResourceClaims(), p.dra.DeviceClassResolver())
	if err != nil {
		// The DynamicResources plugin reports a missing claim; this one has no view.
		return nil, fwk.NewStatus(fwk.Skip)
	}
	devs := d.devicesOn(nil)
	if devs.unmodelled || devs.adminAccess || devs.shares > 0 || devs.gpus == 0 {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	slices, err := p.dra.ResourceSlices().ListWithDeviceTaintRules()
	if err != nil {
		return nil, fwk.AsStatus(fmt.Errorf("list ResourceSlices: %w", err))
	}
	allocated, err := p.dra.ResourceClaims().GatherAllocatedState()
	if err != nil {
		return nil, fwk.AsStatus(fmt.Errorf("allocated devices: %w", err))
	}
	cs.Write(filterStateKey, &filterState{
		demand:    d,
		gpus:      int(devs.gpus),
		vendors:   devs.gpuVendors(),
		byNode:    p.layouts.snapshot(slices),
		allocated: allocated,
	})
	return nil, nil
}

// PreFilterExtensions: none. Like the DynamicResources plugin's, the check reads allocated
// devices, not the pods on a node, so a preemption simulation that takes pods off a node
// frees none of their devices for it.
func (p *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Filter turns the node down when it has fewer free whole GPUs than the pod asks for.
func (p *Plugin) Filter(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) *fwk.Status {
	data, err := cs.Read(filterStateKey)
	if err != nil {
		return nil // PreFilter took no view
	}
	s := data.(*filterState)
	ls := s.byNode[ni.Node().Name]
	if len(ls) == 0 || s.demand.offeredBy(ni.GetAllocatable().GetScalarResources()) {
		return nil
	}
	if n := freeWholeGPUs(freeGPUs(ls, s.allocated), s.vendors); n < s.gpus {
		return fwk.NewStatus(fwk.Unschedulable, reasonTooFewGPUs)
	}
	return nil
}

// freeWholeGPUs counts the node's GPUs nothing uses, of the given vendors (nil: any; a GPU
// that names no vendor counts for every vendor).
func freeWholeGPUs(g *nodeGPUs, vendors []string) int {
	n := 0
	for i, f := range g.free {
		if f < placement.MilliPerGPU {
			continue
		}
		if v := g.vendors[i]; vendors == nil || v == "" || slices.Contains(vendors, v) {
			n++
		}
	}
	return n
}

// EventsToRegister: a node turned down gets GPUs back when a claim is deallocated or
// deleted and when its ResourceSlices change; a new node may have them.
func (p *Plugin) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeAllocatable}},
		{Event: fwk.ClusterEvent{Resource: fwk.ResourceClaim, ActionType: fwk.Add | fwk.Update | fwk.Delete}},
		{Event: fwk.ClusterEvent{Resource: fwk.ResourceSlice, ActionType: fwk.Add | fwk.Update}},
		{Event: fwk.ClusterEvent{Resource: fwk.DeviceClass, ActionType: fwk.Add | fwk.Update}},
	}, nil
}

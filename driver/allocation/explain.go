package allocation

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	schedulingcorev1 "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
)

// NodeDiagnosis says whether a claim fits on one node and, if not, why.
type NodeDiagnosis struct {
	Node string `json:"node"`
	Fits bool   `json:"fits"`
	// RuledOut is why kube-scheduler's node filters keep the claim's pod off the node before
	// devices are looked at (NodeFilter); such a node never fits.
	RuledOut string `json:"ruledOut,omitempty"`
	// Devices are the devices the allocator would give the claim here.
	Devices  []string           `json:"devices,omitempty"`
	Requests []RequestDiagnosis `json:"requests,omitempty"`
	// Reason is one line a person can act on.
	Reason string `json:"reason"`
	// Closeness is 0..1: the share of each request's devices that are free here, averaged.
	Closeness float64 `json:"closeness"`
}

// RequestDiagnosis is one request's view of a node.
type RequestDiagnosis struct {
	Name string `json:"name"`
	Want int    `json:"want"`
	// Matching devices pass the class's and the request's selectors; Free of them are unused.
	Matching int `json:"matching"`
	Free     int `json:"free"`
	// HeldBy names the claims ("namespace/name") that use the matching devices that are not free.
	HeldBy []string `json:"heldBy,omitempty"`
}

// Holders maps each allocated device to the claims that hold it; build it with AddHolder.
type Holders map[structured.DeviceID][]string

// AddHolder records that claim (namespace/name) holds the devices of its allocation.
func (h Holders) AddHolder(claim string, r *resourceapi.AllocationResult) {
	for _, d := range r.Devices.Results {
		id := structured.MakeDeviceID(d.Driver, d.Pool, d.Device)
		h[id] = append(h[id], claim)
	}
}

// Explain asks, for every node with slices, whether the claim fits there now, and when it
// does not, which request or constraint fails and what holds the devices it wanted. The
// verdict is the real allocator's; the per-request counts explain it. Nodes are sorted with
// fitting nodes first, then by closeness.
func (s *State) Explain(ctx context.Context, claim *resourceapi.ResourceClaim, holders Holders) ([]NodeDiagnosis, error) {
	byNode := map[string][]*resourceapi.ResourceSlice{}
	for _, sl := range s.slices {
		if sl.Spec.NodeName != nil {
			byNode[*sl.Spec.NodeName] = append(byNode[*sl.Spec.NodeName], sl)
		}
	}
	used := s.usedCounters()
	var out []NodeDiagnosis
	for node, slices := range byNode {
		d := NodeDiagnosis{Node: node}
		res, err := s.Allocate(ctx, node, claim)
		switch {
		case err == nil:
			d.Fits, d.Devices = true, SortedDevices(res[0])
		case !errors.Is(err, ErrUnsatisfiable):
			return nil, err
		}
		for _, req := range claim.Spec.Devices.Requests {
			rd, err := s.diagnoseRequest(ctx, req, slices, used, holders)
			if err != nil {
				return nil, err
			}
			d.Requests = append(d.Requests, rd)
		}
		d.Reason, d.Closeness = reason(d, claim)
		out = append(out, d)
	}
	sortDiagnoses(out)
	return out, nil
}

// sortDiagnoses puts fitting nodes first, then the closest.
func sortDiagnoses(out []NodeDiagnosis) {
	sort.Slice(out, func(a, b int) bool {
		if out[a].Fits != out[b].Fits {
			return out[a].Fits
		}
		if out[a].Closeness != out[b].Closeness {
			return out[a].Closeness > out[b].Closeness
		}
		return out[a].Node < out[b].Node
	})
}

// Reasons kube-scheduler's node filters give, in its words.
const (
	ReasonUnschedulable    = "node(s) were unschedulable"
	ReasonNodeName         = "node(s) didn't match the requested node name"
	ReasonUntoleratedTaint = "node(s) had untolerated taint(s)"
	ReasonNodeAffinity     = "node(s) didn't match Pod's node affinity/selector"
	ReasonTooManyPods      = "Too many pods"
)

// NodeFilter says why kube-scheduler's filters that run before devices keep the pod off the
// node: NodeUnschedulable, NodeName, TaintToleration, NodeAffinity and NodeResourcesFit, in
// that order, as the scheduler words them ("" when none does). onNode are the pods bound to
// the node; finished ones and the pod itself are not counted. Extended resources the node
// does not list in its allocatable but a DeviceClass of the state names are left to DRA,
// as the scheduler leaves them.
func (s *State) NodeFilter(logger klog.Logger, pod *corev1.Pod, node *corev1.Node, onNode []*corev1.Pod) string {
	if node.Spec.Unschedulable && !schedulingcorev1.TolerationsTolerateTaint(logger, pod.Spec.Tolerations,
		&corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}, true) {
		return ReasonUnschedulable
	}
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != node.Name {
		return ReasonNodeName
	}
	if t, bad := schedulingcorev1.FindMatchingUntoleratedTaint(logger, node.Spec.Taints, pod.Spec.Tolerations, doNotSchedule, true); bad {
		return ReasonUntoleratedTaint + ": " + t.ToString()
	}
	if ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); err != nil || !ok {
		return ReasonNodeAffinity
	}
	return strings.Join(s.insufficient(pod, node, onNode), ", ")
}

func doNotSchedule(t *corev1.Taint) bool {
	return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
}

// insufficient is NodeResourcesFit: the pod's requests against the node's allocatable less
// what the pods on it request.
func (s *State) insufficient(pod *corev1.Pod, node *corev1.Node, onNode []*corev1.Pod) []string {
	var out []string
	used := corev1.ResourceList{}
	count := 0
	for _, p := range onNode {
		if p.UID == pod.UID || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		count++
		for name, q := range resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{UseStatusResources: true}) {
			sum := used[name]
			sum.Add(q)
			used[name] = sum
		}
	}
	alloc := node.Status.Allocatable
	if pods := alloc[corev1.ResourcePods]; int64(count+1) > pods.Value() {
		out = append(out, ReasonTooManyPods)
	}
	want := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, string(name))
	}
	sort.Slice(names, func(a, b int) bool { return resourceOrder(names[a]) < resourceOrder(names[b]) })
	for _, n := range names {
		name := corev1.ResourceName(n)
		q := want[name]
		if q.IsZero() || name == corev1.ResourcePods {
			continue
		}
		capacity, listed := alloc[name]
		if !listed && s.extendedByDRA(name) {
			continue
		}
		free := capacity.DeepCopy()
		free.Sub(used[name])
		if q.Cmp(free) > 0 {
			out = append(out, "Insufficient "+n)
		}
	}
	return out
}

// resourceOrder puts cpu, memory and ephemeral-storage first, as the scheduler checks them.
func resourceOrder(name string) string {
	switch corev1.ResourceName(name) {
	case corev1.ResourceCPU:
		return "0"
	case corev1.ResourceMemory:
		return "1"
	case corev1.ResourceEphemeralStorage:
		return "2"
	}
	return "3" + name
}

// extendedByDRA: a DeviceClass names the extended resource (spec.extendedResourceName, or
// the implicit deviceclass.resource.kubernetes.io/CLASS).
func (s *State) extendedByDRA(name corev1.ResourceName) bool {
	for _, c := range s.classes {
		if (c.Spec.ExtendedResourceName != nil && *c.Spec.ExtendedResourceName == string(name)) ||
			string(name) == resourceapi.ResourceDeviceClassPrefix+c.Name {
			return true
		}
	}
	return false
}

// ExplainFiltered is Explain for a claim of a pod: the nodes in ruledOut (node name to a
// NodeFilter reason) do not fit, for that reason, whatever their devices say; what the
// devices say follows the reason.
func (s *State) ExplainFiltered(ctx context.Context, claim *resourceapi.ResourceClaim, holders Holders, ruledOut map[string]string) ([]NodeDiagnosis, error) {
	out, err := s.Explain(ctx, claim, holders)
	if err != nil {
		return nil, err
	}
	for k := range out {
		d := &out[k]
		why, ok := ruledOut[d.Node]
		if !ok || why == "" {
			continue
		}
		d.RuledOut = why
		if d.Fits {
			d.Reason = why + "; its devices would fit: " + strings.Join(d.Devices, ", ")
		} else {
			d.Reason = why + "; " + d.Reason
		}
		d.Fits, d.Devices = false, nil
	}
	sortDiagnoses(out)
	return out, nil
}

func reason(d NodeDiagnosis, claim *resourceapi.ResourceClaim) (string, float64) {
	closeness := 0.0
	for _, r := range d.Requests {
		if r.Want > 0 {
			closeness += float64(min(r.Free, r.Want)) / float64(r.Want)
		}
	}
	if n := len(d.Requests); n > 0 {
		closeness /= float64(n)
	}
	if d.Fits {
		return "fits: " + strings.Join(d.Devices, ", "), 1
	}
	for _, r := range d.Requests {
		if r.Matching < r.Want {
			return fmt.Sprintf("request %s: %d devices here match its class and selectors, it needs %d", r.Name, r.Matching, r.Want), closeness
		}
	}
	for _, r := range d.Requests {
		if r.Free < r.Want {
			held := ""
			if len(r.HeldBy) > 0 {
				held = " (held by " + strings.Join(r.HeldBy, ", ") + ")"
			}
			return fmt.Sprintf("request %s: %d devices match but only %d are free, it needs %d%s", r.Name, r.Matching, r.Free, r.Want, held), closeness
		}
	}
	var cons []string
	for _, c := range claim.Spec.Devices.Constraints {
		if c.MatchAttribute != nil {
			cons = append(cons, "matchAttribute "+string(*c.MatchAttribute))
		}
	}
	if len(cons) > 0 {
		return "every request has enough free devices, but not together: " + strings.Join(cons, ", ") + " cannot be met by the free ones", closeness
	}
	return "enough matching devices are free, but capacity or shared counters do not fit the requests together", closeness
}

func (s *State) diagnoseRequest(ctx context.Context, req resourceapi.DeviceRequest, slices []*resourceapi.ResourceSlice, used map[string][]structured.DeviceID, holders Holders) (RequestDiagnosis, error) {
	rd := RequestDiagnosis{Name: req.Name}
	ex := req.Exactly
	if ex == nil {
		if len(req.FirstAvailable) == 0 {
			return rd, nil
		}
		first := req.FirstAvailable[0] // explain the preferred alternative
		ex = &resourceapi.ExactDeviceRequest{DeviceClassName: first.DeviceClassName, Selectors: first.Selectors, Count: first.Count, AllocationMode: first.AllocationMode}
	}
	rd.Want = int(ex.Count)
	if ex.AllocationMode == resourceapi.DeviceAllocationModeAll {
		rd.Want = 1
	}
	var selectors []resourceapi.DeviceSelector
	if class, err := s.classes.Get(ex.DeviceClassName); err == nil {
		selectors = append(selectors, class.Spec.Selectors...)
	} else {
		return rd, fmt.Errorf("request %s: DeviceClass %s: %w", req.Name, ex.DeviceClassName, err)
	}
	selectors = append(selectors, ex.Selectors...)
	held := map[string]bool{}
	for _, sl := range slices {
		for _, dev := range sl.Spec.Devices {
			ok, err := s.matches(ctx, sl.Spec.Driver, dev, selectors)
			if err != nil {
				return rd, fmt.Errorf("request %s: %w", req.Name, err)
			}
			if !ok {
				continue
			}
			rd.Matching++
			id := structured.MakeDeviceID(sl.Spec.Driver, sl.Spec.Pool.Name, dev.Name)
			blockers := s.blockers(id, sl.Spec.Driver, sl.Spec.Pool.Name, dev, used)
			if len(blockers) == 0 {
				rd.Free++
				continue
			}
			for _, b := range blockers {
				for _, c := range holders[b] {
					held[c] = true
				}
			}
		}
	}
	for c := range held {
		rd.HeldBy = append(rd.HeldBy, c)
	}
	sort.Strings(rd.HeldBy)
	return rd, nil
}

func (s *State) matches(ctx context.Context, driver string, dev resourceapi.Device, selectors []resourceapi.DeviceSelector) (bool, error) {
	for _, sel := range selectors {
		if sel.CEL == nil {
			continue
		}
		res := s.celCache.GetOrCompile(sel.CEL.Expression)
		if res.Error != nil {
			return false, fmt.Errorf("CEL %q: %w", sel.CEL.Expression, res.Error)
		}
		ok, _, err := res.DeviceMatches(ctx, cel.Device{Driver: driver, AllowMultipleAllocations: dev.AllowMultipleAllocations, Attributes: dev.Attributes, Capacity: dev.Capacity})
		if err != nil || !ok {
			return false, nil // a selector that errors on a device does not select it
		}
	}
	return true, nil
}

// usedCounters maps "driver/pool/counterSet/counter" to the allocated devices consuming it.
func (s *State) usedCounters() map[string][]structured.DeviceID {
	return s.usedCountersOf(s.slices)
}

// usedCountersOf is usedCounters for the devices of the given slices: every counter of
// their pools an allocated device or share among them consumes, with the devices that
// consume it. Slices holding every device of their pools give the exact answer for those
// pools (a device consumes only counters of its own pool).
func (s *State) usedCountersOf(slices []*resourceapi.ResourceSlice) map[string][]structured.DeviceID {
	used := map[string][]structured.DeviceID{}
	for _, sl := range slices {
		for _, dev := range sl.Spec.Devices {
			if len(dev.ConsumesCounters) == 0 {
				continue
			}
			id := structured.MakeDeviceID(sl.Spec.Driver, sl.Spec.Pool.Name, dev.Name)
			if !s.allocated.AllocatedDevices.Has(id) && s.shares[id] == 0 {
				continue
			}
			for _, cc := range dev.ConsumesCounters {
				for c := range cc.Counters {
					k := counterKey(sl.Spec.Driver, sl.Spec.Pool.Name, cc.CounterSet, c)
					used[k] = append(used[k], id)
				}
			}
		}
	}
	return used
}

// blockers lists the allocated devices that keep dev from being used: itself when
// allocated exclusively, or devices consuming the same counters.
func (s *State) blockers(id structured.DeviceID, driver, pool string, dev resourceapi.Device, used map[string][]structured.DeviceID) []structured.DeviceID {
	var out []structured.DeviceID
	if s.allocated.AllocatedDevices.Has(id) {
		out = append(out, id)
	}
	for _, cc := range dev.ConsumesCounters {
		for c := range cc.Counters {
			for _, other := range used[counterKey(driver, pool, cc.CounterSet, c)] {
				if other != id {
					out = append(out, other)
				}
			}
		}
	}
	return out
}

func counterKey(driver, pool, set, counter string) string {
	return driver + "/" + pool + "/" + set + "/" + counter
}

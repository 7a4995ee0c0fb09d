package allocation

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// NodeDiagnosis says whether a claim fits on one node and, if not, why.
type NodeDiagnosis struct {
	Node string
	Fits bool
	// Devices are the devices the allocator would give the claim here.
	Devices  []string
	Requests []RequestDiagnosis
	// Reason is one line a person can act on.
	Reason string
	// Closeness is 0..1: the share of each request's devices that are free here, averaged.
	Closeness float64
}

// RequestDiagnosis is one request's view of a node.
type RequestDiagnosis struct {
	Name string
	Want int
	// Matching devices pass the class's and the request's selectors; Free of them are unused.
	Matching, Free int
	// HeldBy names the claims ("namespace/name") that use the matching devices that are not free.
	HeldBy []string
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
	sort.Slice(out, func(a, b int) bool {
		if out[a].Fits != out[b].Fits {
			return out[a].Fits
		}
		if out[a].Closeness != out[b].Closeness {
			return out[a].Closeness > out[b].Closeness
		}
		return out[a].Node < out[b].Node
	})
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
	consumers := map[structured.DeviceID][]string{}
	for _, sl := range s.slices {
		for _, dev := range sl.Spec.Devices {
			id := structured.MakeDeviceID(sl.Spec.Driver, sl.Spec.Pool.Name, dev.Name)
			for _, cc := range dev.ConsumesCounters {
				for c := range cc.Counters {
					consumers[id] = append(consumers[id], counterKey(sl.Spec.Driver, sl.Spec.Pool.Name, cc.CounterSet, c))
				}
			}
		}
	}
	used := map[string][]structured.DeviceID{}
	inUse := s.allocated.AllocatedDevices.Clone()
	for shared := range s.allocated.AllocatedSharedDeviceIDs {
		inUse.Insert(shared.GetDeviceID())
	}
	for id := range inUse {
		for _, k := range consumers[id] {
			used[k] = append(used[k], id)
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

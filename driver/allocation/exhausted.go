package allocation

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Exhausted reports whether no device of the node can be allocated any more, whatever a
// claim asks for (admin access aside): every device the node's slices publish is allocated
// exclusively or needs more of a shared counter than its allocated devices leave. A gang
// planner asks it before running the allocator on a node: on a packed cluster most nodes
// are full, and the allocator evaluates every device's CEL selectors before it looks at
// what is allocated, so a full node cost as much as a free one.
//
// It errs only towards false: device taints, consumable capacity of devices that allow
// several allocations and slices shared between nodes are not looked at (false then
// leaves the answer to the allocator).
func (s *State) Exhausted(node string) bool {
	if len(s.shared) > 0 {
		return false
	}
	type counterKey struct{ driver, pool, set, counter string }
	capacity := map[counterKey]resource.Quantity{}
	for _, sl := range s.nodeLocal[node] {
		for _, cs := range sl.Spec.SharedCounters {
			for name, c := range cs.Counters {
				capacity[counterKey{sl.Spec.Driver, sl.Spec.Pool.Name, cs.Name, name}] = c.Value
			}
		}
	}
	inUse := func(id structured.DeviceID) bool { return s.allocated.AllocatedDevices.Has(id) || s.shares[id] > 0 }
	// What the node's allocated devices consume (a device allocated several times counts
	// once: less than the allocator may count, never more).
	used := map[counterKey]resource.Quantity{}
	for _, sl := range s.nodeLocal[node] {
		for _, dev := range sl.Spec.Devices {
			if len(dev.ConsumesCounters) == 0 || !inUse(structured.MakeDeviceID(sl.Spec.Driver, sl.Spec.Pool.Name, dev.Name)) {
				continue
			}
			for _, cc := range dev.ConsumesCounters {
				for name, c := range cc.Counters {
					k := counterKey{sl.Spec.Driver, sl.Spec.Pool.Name, cc.CounterSet, name}
					q := used[k]
					q.Add(c.Value)
					used[k] = q
				}
			}
		}
	}
	for _, sl := range s.nodeLocal[node] {
		for _, dev := range sl.Spec.Devices {
			id := structured.MakeDeviceID(sl.Spec.Driver, sl.Spec.Pool.Name, dev.Name)
			if s.allocated.AllocatedDevices.Has(id) && !allowsMultiple(dev) {
				continue
			}
			if s.shares[id] > 0 {
				// Shared already: its counters are taken by itself, another share may fit
				// in what capacity it has left (not looked at here).
				return false
			}
			if fitsCounters(dev, func(set, counter string) (resource.Quantity, resource.Quantity, bool) {
				k := counterKey{sl.Spec.Driver, sl.Spec.Pool.Name, set, counter}
				c, ok := capacity[k]
				return c, used[k], ok
			}) {
				return false
			}
		}
	}
	return true
}

func allowsMultiple(dev resourceapi.Device) bool {
	return dev.AllowMultipleAllocations != nil && *dev.AllowMultipleAllocations
}

// fitsCounters: every counter dev consumes has room for it. A counter whose capacity is not
// known here fits (the allocator decides).
func fitsCounters(dev resourceapi.Device, counter func(set, name string) (capacity, used resource.Quantity, known bool)) bool {
	for _, cc := range dev.ConsumesCounters {
		for name, c := range cc.Counters {
			capacity, used, known := counter(cc.CounterSet, name)
			if !known {
				continue
			}
			used.Add(c.Value)
			if used.Cmp(capacity) > 0 {
				return false
			}
		}
	}
	return true
}

package allocation

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Usage is what a state's allocations hold: the devices allocated whole and the counters
// that allocated devices and shares consume. Build it after the last Commit, then ask it
// about many devices.
type Usage struct {
	state *State
	used  map[string][]structured.DeviceID
}

// Usage takes stock of what the state's allocations hold.
func (s *State) Usage() *Usage { return &Usage{state: s, used: s.usedCounters()} }

// NodeUsage is Usage for the devices of one node's own slices (spec.nodeName): it reads
// only the slices of the pools those belong to, so it costs the node's devices, not the
// cluster's. Asked about a device outside those pools, it may miss what holds its counters.
func (s *State) NodeUsage(node string) *Usage {
	pools := map[[2]string]bool{}
	for _, sl := range s.nodeLocal[node] {
		pools[[2]string{sl.Spec.Driver, sl.Spec.Pool.Name}] = true
	}
	var slices []*resourceapi.ResourceSlice
	for _, sl := range s.slices {
		if pools[[2]string{sl.Spec.Driver, sl.Spec.Pool.Name}] {
			slices = append(slices, sl)
		}
	}
	return &Usage{state: s, used: s.usedCountersOf(slices)}
}

// InUse reports whether dev, published by driver in pool, cannot be allocated now because
// it is allocated or shares a counter with an allocated device: for a whole GPU, a share
// of it, a MIG device on it or an NVLink group holding it.
func (u *Usage) InUse(driver, pool string, dev resourceapi.Device) bool {
	id := structured.MakeDeviceID(driver, pool, dev.Name)
	return len(u.state.blockers(id, driver, pool, dev, u.used)) > 0
}

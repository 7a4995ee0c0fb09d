package driver

import (
	resourceapi "k8s.io/api/resource/v1"
)

// SimulatedSlices discovers a simulated node (built-in profile or profile file) and renders
// the ResourceSlices its kubelet plugin would publish, for tests, demos and simulators.
func SimulatedSlices(profile, nodeName string, opts RenderOptions) (*Inventory, []*resourceapi.ResourceSlice, error) {
	b, err := OpenBackend("sim:"+profile, nodeName)
	if err != nil {
		return nil, nil, err
	}
	defer b.Close()
	inv, err := Discover(b)
	if err != nil {
		return nil, nil, err
	}
	pool, err := Render(inv, opts)
	if err != nil {
		return nil, nil, err
	}
	return inv, pool.ResourceSlices(nodeName, 1), nil
}

// PlainSlices renders inv as a driver that only hands out whole GPUs would publish it: the same
// whole GPUs with the same attributes, in one slice, without counters, shares, MIG devices or
// NVLink groups. Benchmarks measure gpudra's slices against these.
func PlainSlices(inv *Inventory, nodeName string) ([]*resourceapi.ResourceSlice, error) {
	pool, err := Render(inv, RenderOptions{MIG: MIGNone, NoShares: true, NoGroups: true})
	if err != nil {
		return nil, err
	}
	rs := pool.ResourceSlices(nodeName, 1)
	var devs []resourceapi.Device
	for _, s := range rs {
		for _, d := range s.Spec.Devices {
			d.ConsumesCounters = nil
			devs = append(devs, d)
		}
	}
	s := rs[len(rs)-1].DeepCopy()
	s.Spec.Devices, s.Spec.SharedCounters, s.Spec.Pool.ResourceSliceCount = devs, nil, 1
	return []*resourceapi.ResourceSlice{s}, nil
}

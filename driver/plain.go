package driver

import (
	resourceapi "k8s.io/api/resource/v1"
)

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

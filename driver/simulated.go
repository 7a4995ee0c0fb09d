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

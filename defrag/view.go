package defrag

import (
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpudra/gpudra/topology/placement"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// device is a published gpudra device: its node, type and the GPUs it uses.
type device struct {
	node string
	kind string
	gpus []int
}

// gpu is one GPU's use: the compute its shares hold (milli-GPU), how many devices hold it
// whole (the GPU itself, a MIG device, an NVLink group), and its MIG devices.
type gpu struct {
	model       string
	shareMilli  int64
	held        int
	migDevices  int
	migAssigned int
}

// free is the milli-GPU left on the GPU.
func (g *gpu) free() int64 {
	if g.held > 0 {
		return 0
	}
	return max(placement.MilliPerGPU-g.shareMilli, 0)
}

// view is the GPUs of every node and what allocations hold of them: the plain-data side
// of the allocator's state, kept in step with it.
type view struct {
	devices map[structured.DeviceID]device
	nodes   map[string][]gpu
}

// newView reads gpudra's devices from the slices; devices that do not read are left out.
func newView(slices []resourceapi.ResourceSlice) *view {
	v := &view{devices: map[structured.DeviceID]device{}, nodes: map[string][]gpu{}}
	for k := range slices {
		s := &slices[k]
		if s.Spec.Driver != api.DriverName || s.Spec.NodeName == nil || *s.Spec.NodeName == "" {
			continue
		}
		node := *s.Spec.NodeName
		if _, ok := v.nodes[node]; !ok {
			v.nodes[node] = nil
		}
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			info, err := api.ReadDevice(d)
			if err != nil {
				continue
			}
			v.devices[structured.MakeDeviceID(s.Spec.Driver, s.Spec.Pool.Name, d.Name)] = device{node: node, kind: info.Type, gpus: info.GPUs}
			for _, g := range info.GPUs {
				if g < 0 {
					continue
				}
				gs := v.nodes[node]
				for len(gs) <= g {
					gs = append(gs, gpu{held: -1}) // not published as a GPU (yet)
				}
				switch info.Type {
				case api.TypeGPU:
					gs[g].held++ // from -1: published
					gs[g].model = info.Model
				case api.TypeMIG:
					gs[g].migDevices++
				}
				v.nodes[node] = gs
			}
		}
	}
	// A GPU whose whole device is not published (MIG mode) is counted through its MIG
	// devices; one with neither is not a GPU here.
	for node, gs := range v.nodes {
		kept := gs[:0:0]
		for _, g := range gs {
			if g.held < 0 && g.migDevices == 0 {
				g.held = 1 // nothing to allocate: not free
			} else if g.held < 0 {
				g.held = 0
			}
			kept = append(kept, g)
		}
		v.nodes[node] = kept
	}
	return v
}

// clone copies the use, sharing the device table.
func (v *view) clone() *view {
	c := &view{devices: v.devices, nodes: make(map[string][]gpu, len(v.nodes))}
	for n, gs := range v.nodes {
		c.nodes[n] = slices.Clone(gs)
	}
	return c
}

// apply adds (sign 1) or takes off (sign -1) an allocation's hold on the GPUs.
func (v *view) apply(r *resourceapi.AllocationResult, sign int) {
	for _, res := range r.Devices.Results {
		d, ok := v.devices[structuredID(res)]
		if !ok {
			continue
		}
		gs := v.nodes[d.node]
		for _, i := range d.gpus {
			if i < 0 || i >= len(gs) {
				continue
			}
			g := &gs[i]
			switch d.kind {
			case api.TypeShare:
				if q, ok := res.ConsumedCapacity[api.CapCompute]; ok {
					g.shareMilli += int64(sign) * q.Value() * placement.MilliPerGPU / 100
				} else {
					g.shareMilli += int64(sign) * placement.MilliPerGPU
				}
			case api.TypeMIG:
				g.migAssigned += sign
				g.held += sign
			default:
				g.held += sign
			}
		}
	}
}

// nodeNames are the nodes with GPUs, sorted.
func (v *view) nodeNames() []string {
	out := make([]string, 0, len(v.nodes))
	for n, gs := range v.nodes {
		if len(gs) > 0 {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// wholeFree counts the node's GPUs with nothing allocated.
func (v *view) wholeFree(node string) int {
	k := 0
	for i := range v.nodes[node] {
		if g := &v.nodes[node][i]; g.held == 0 && g.shareMilli == 0 {
			k++
		}
	}
	return k
}

// freeMilli is the node's milli-GPU left, by GPU index.
func (v *view) freeMilli(node string) []int64 {
	gs := v.nodes[node]
	out := make([]int64, len(gs))
	for i := range gs {
		out[i] = gs[i].free()
	}
	return out
}

// structuredID is the allocator's id of an allocated device.
func structuredID(r resourceapi.DeviceRequestAllocationResult) structured.DeviceID {
	return structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
}

package fragmentation

import (
	"slices"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpudra/gpudra/topology/placement"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// nodeGPUs is one node's GPUs as the placement policies see them: the model and the
// milli-GPU left on each GPU, by GPU index, and each GPU's vendor and model.
type nodeGPUs struct {
	model   string
	free    []int64
	vendors []string
	models  []string
}

// of is the node's GPUs of the given vendors (nil: all of them), the view a pod that may
// take only those has of a node whose GPUs are of several vendors; model is then the
// first such GPU's.
func (n *nodeGPUs) of(vendors []string) *nodeGPUs {
	if n == nil || vendors == nil || !slices.ContainsFunc(n.vendors, func(v string) bool { return v != "" && !slices.Contains(vendors, v) }) {
		return n
	}
	out := &nodeGPUs{}
	for i, v := range n.vendors {
		if v == "" || !slices.Contains(vendors, v) {
			continue
		}
		if out.model == "" {
			out.model = n.models[i]
		}
		out.free = append(out.free, n.free[i])
		out.vendors = append(out.vendors, v)
		out.models = append(out.models, n.models[i])
	}
	return out
}

// gpuDevice is a published device and the GPUs it uses.
type gpuDevice struct {
	id     structured.DeviceID
	kind   string
	gpus   []int
	model  string
	vendor string
}

// layouts caches what each ResourceSlice says about GPUs, by slice name, until the
// slice changes: reading attributes of every device on every scheduling cycle cost
// the plugin ~40 µs per node. It also keeps the layouts of each node, rebuilt only when
// the listed slices change: a scheduling cycle then reads the candidate nodes' layouts
// instead of looking up every slice of the cluster by name.
type layouts struct {
	mu     sync.Mutex
	slices map[string]*sliceLayout
	// listed are the slices byNode was built from; the informer hands out the same
	// objects (in any order) until one changes, so looking them up is enough to know.
	listed map[*resourceapi.ResourceSlice]struct{}
	byNode map[string][]*sliceLayout
}

type sliceLayout struct {
	resourceVersion string
	node            string
	devices         []gpuDevice
}

// gpusByNode reads the GPUs of the given nodes from gpudra's ResourceSlices and takes off
// what allocated claims hold: a GPU allocated whole, as a MIG device or in an NVLink or
// XGMI group has nothing left; a shared GPU has 1000 minus ten times the compute percent its shares
// reserve.
func (c *layouts) gpusByNode(slices []*resourceapi.ResourceSlice, allocated *structured.AllocatedState, nodes sets.Set[string]) map[string]*nodeGPUs {
	return layoutsFree(c.snapshot(slices), allocated, nodes)
}

// layoutsFree is the GPUs of the given nodes, from their layouts less what is allocated.
func layoutsFree(byNode map[string][]*sliceLayout, allocated *structured.AllocatedState, nodes sets.Set[string]) map[string]*nodeGPUs {
	out := make(map[string]*nodeGPUs, len(nodes))
	for node := range nodes {
		if ls := byNode[node]; len(ls) > 0 {
			out[node] = freeGPUs(ls, allocated)
		}
	}
	return out
}

// snapshot is the layouts of every node's gpudra slices, by node name, read only.
func (c *layouts) snapshot(slices []*resourceapi.ResourceSlice) map[string][]*sliceLayout {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.unchanged(slices) {
		c.index(slices)
	}
	return c.byNode
}

// unchanged: the slices are the very objects byNode was built from. c.mu is held.
func (c *layouts) unchanged(slices []*resourceapi.ResourceSlice) bool {
	if len(slices) != len(c.listed) || len(slices) == 0 {
		return false
	}
	for _, s := range slices {
		if _, ok := c.listed[s]; !ok {
			return false
		}
	}
	return true
}

// index rebuilds byNode from the listed slices, parsing those that are new or changed.
// c.mu is held.
func (c *layouts) index(slices []*resourceapi.ResourceSlice) {
	if c.slices == nil {
		c.slices = map[string]*sliceLayout{}
	}
	byNode := map[string][]*sliceLayout{}
	current := 0
	for _, s := range slices {
		if s.Spec.Driver != api.DriverName || s.Spec.NodeName == nil {
			continue
		}
		current++
		l := c.slices[s.Name]
		if l == nil || l.resourceVersion != s.ResourceVersion || s.ResourceVersion == "" {
			l = &sliceLayout{resourceVersion: s.ResourceVersion, node: *s.Spec.NodeName, devices: parseSlice(s)}
			c.slices[s.Name] = l
		}
		byNode[l.node] = append(byNode[l.node], l)
	}
	if len(c.slices) > current { // slices were deleted: forget them
		keep := make(map[string]*sliceLayout, current)
		for _, s := range slices {
			if l := c.slices[s.Name]; l != nil {
				keep[s.Name] = l
			}
		}
		c.slices = keep
	}
	c.listed = make(map[*resourceapi.ResourceSlice]struct{}, len(slices))
	for _, s := range slices {
		c.listed[s] = struct{}{}
	}
	c.byNode = byNode
}

// parseSlice lists a slice's devices and the GPUs each uses.
func parseSlice(s *resourceapi.ResourceSlice) []gpuDevice {
	out := make([]gpuDevice, 0, len(s.Spec.Devices))
	for i := range s.Spec.Devices {
		d := &s.Spec.Devices[i]
		g := gpuDevice{id: structured.MakeDeviceID(s.Spec.Driver, s.Spec.Pool.Name, d.Name)}
		// A device that does not read is counted as using no GPU.
		info, _ := api.ReadDevice(d)
		g.kind, g.gpus = info.Type, info.GPUs
		if g.kind == api.TypeGPU || g.kind == api.TypeShare {
			g.model, g.vendor = info.Model, info.Vendor
		}
		out = append(out, g)
	}
	return out
}

// freeGPUs is one node's GPUs given its devices and what is allocated.
func freeGPUs(ls []*sliceLayout, allocated *structured.AllocatedState) *nodeGPUs {
	n := &nodeGPUs{}
	for _, l := range ls {
		for _, d := range l.devices {
			if d.kind == api.TypeGPU && len(d.gpus) == 1 && d.gpus[0] >= 0 {
				for len(n.free) <= d.gpus[0] {
					n.free, n.vendors, n.models = append(n.free, 0), append(n.vendors, ""), append(n.models, "")
				}
				n.free[d.gpus[0]] = placement.MilliPerGPU
				n.vendors[d.gpus[0]], n.models[d.gpus[0]] = d.vendor, d.model
				if n.model == "" {
					n.model = d.model
				}
			}
		}
	}
	for _, l := range ls {
		for _, d := range l.devices {
			for _, i := range d.gpus {
				if i < 0 || i >= len(n.free) {
					continue
				}
				switch {
				case d.kind == api.TypeShare:
					n.free[i] -= reservedMilli(allocated, d.id)
				case allocated != nil && allocated.AllocatedDevices.Has(d.id):
					n.free[i] = 0
				}
			}
		}
	}
	for i := range n.free {
		n.free[i] = max(n.free[i], 0)
	}
	return n
}

// reservedMilli is the compute that allocated shares reserve on a share device.
func reservedMilli(allocated *structured.AllocatedState, id structured.DeviceID) int64 {
	if allocated == nil {
		return 0
	}
	q, ok := allocated.AggregatedCapacity[id][api.CapCompute]
	if !ok || q == nil {
		return 0
	}
	return q.Value() * placement.MilliPerGPU / 100
}

package driver

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

type attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute

func (a attrs) str(name, v string) {
	if v != "" {
		a[resourceapi.QualifiedName(name)] = resourceapi.DeviceAttribute{StringValue: ptr.To(v)}
	}
}
func (a attrs) int(name string, v int) {
	a[resourceapi.QualifiedName(name)] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(v))}
}
func (a attrs) bool(name string, v bool) {
	a[resourceapi.QualifiedName(name)] = resourceapi.DeviceAttribute{BoolValue: ptr.To(v)}
}
func (a attrs) version(name, v string) {
	if s := Semver(v); s != "" {
		a[resourceapi.QualifiedName(name)] = resourceapi.DeviceAttribute{VersionValue: ptr.To(s)}
	}
}

// Semver turns NVIDIA's dotted versions into semantic versions: "535.161.08" →
// "535.161.8", "12.4" → "12.4.0", "9.0" → "9.0.0". It returns "" for non-numeric input.
func Semver(v string) string {
	parts := strings.Split(v, ".")
	if len(parts) == 0 || len(parts) > 3 {
		return ""
	}
	for len(parts) < 3 {
		parts = append(parts, "0")
	}
	for k, p := range parts {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return ""
		}
		parts[k] = strconv.FormatUint(n, 10)
	}
	return strings.Join(parts, ".")
}

// common sets the attributes every device derived from GPU g carries.
func common(a attrs, inv *Inventory, g *GPU) {
	a.str(api.AttrVendor, g.VendorOf())
	a.str(api.AttrProductName, g.ProductName)
	a.str(api.AttrBrand, g.Brand)
	a.str(api.AttrArchitecture, g.Architecture)
	a.version(api.AttrCUDAComputeCapability, g.CUDAComputeCapability)
	if g.IsNVIDIA() { // the inventory's driver is NVIDIA's
		a.version(api.AttrDriverVersion, inv.DriverVersion)
		a.version(api.AttrCUDADriverVersion, inv.CUDADriverVersion)
	}
	if g.PCIeRoot != "" {
		a.str(string(deviceattribute.StandardDeviceAttributePCIeRoot), g.PCIeRoot)
	}
	if g.NUMANode != nil {
		a.int(string(deviceattribute.StandardDeviceAttributeNUMANode), *g.NUMANode)
	}
	if k := g.KFD; k != nil {
		a.str(api.AttrGFXTarget, k.GFXTarget)
		a.str(api.AttrComputePartition, k.ComputePartition)
		a.str(api.AttrMemoryPartition, k.MemoryPartition)
		if k.XGMIHive != "" {
			a.str(api.AttrXGMIHive, k.XGMIHive)
			a.str(api.AttrLinkDomain, "xgmi-"+k.XGMIHive)
		}
		a.int(api.AttrXGMILinks, len(k.XGMIPeers))
	}
}

// topologyAttrs sets the NVLink attributes matchAttribute constraints use.
func topologyAttrs(a attrs, inv *Inventory, index int) {
	pos := inv.position(index)
	a.str(api.AttrNVLinkFabric, inv.NVLink.Fabric())
	links := inv.NVLink.SwitchLinks[pos]
	for _, l := range inv.NVLink.Links[pos] {
		links += l
	}
	a.int(api.AttrNVLinkLinks, links)
	if c := inv.NVLink.Clique()[pos]; c != nil {
		a.str(api.AttrNVLinkClique, "nvlink-"+inv.indexList(c))
	}
	if d := inv.NVLink.Domains()[pos]; d != nil {
		a.str(api.AttrNVLinkDomain, "nvlink-"+inv.indexList(d))
		a.str(api.AttrLinkDomain, "nvlink-"+inv.indexList(d))
	}
}

// position maps a GPU index to its position in GPUs (and in the NVLink graph).
func (inv *Inventory) position(index int) int {
	for k := range inv.GPUs {
		if inv.GPUs[k].Index == index {
			return k
		}
	}
	return -1
}

// indexList names positions by GPU index: "0-1-2-3".
func (inv *Inventory) indexList(positions []int) string {
	return topology.JoinIndices(inv.indices(positions), "-")
}

// indices are the GPU indices at the given positions in GPUs.
func (inv *Inventory) indices(positions []int) []int {
	idx := make([]int, len(positions))
	for k, p := range positions {
		idx[k] = inv.GPUs[p].Index
	}
	return idx
}

func bytesQuantity(b uint64) resource.Quantity {
	if b%(1<<20) == 0 {
		return resource.MustParse(fmt.Sprintf("%dMi", b>>20))
	}
	return *resource.NewQuantity(int64(b), resource.BinarySI)
}

func capacity(v resource.Quantity) resourceapi.DeviceCapacity {
	return resourceapi.DeviceCapacity{Value: v}
}

// computePercent is the compute capacity of a device that is not shared: the percent of
// one GPU it takes. Kueue charges it against a queue's quota (the same capacity a share
// asks for), so that whole GPUs, NVLink groups, MIG devices and shares are counted in one
// unit.
func computePercent(p int64) resourceapi.DeviceCapacity {
	return capacity(*resource.NewQuantity(p, resource.DecimalSI))
}

// MIGComputePercent is the percent of its GPU a MIG device takes: the larger of its
// multiprocessors' and its memory's fraction, rounded up, so that a queue charged for its
// MIG devices never holds more of a GPU than it pays for, in either.
func MIGComputePercent(multiprocessors, gpuMultiprocessors int, memory, gpuMemory uint64) int64 {
	pct := int64(100)
	if gpuMultiprocessors > 0 {
		pct = ceilDiv(100*int64(multiprocessors), int64(gpuMultiprocessors))
	}
	if gpuMemory > 0 {
		// memory/gpuMemory in percent, rounded up, without overflowing: memory ≤ 2^50
		// for any real card, so memory>>20 (MiB) * 100 fits in an int64.
		m := ceilDiv(100*int64(memory>>20), max(int64(gpuMemory>>20), 1))
		pct = max(pct, m)
	}
	return min(max(pct, 1), 100)
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

func gpuDevice(inv *Inventory, g *GPU, counters counterPlan) resourceapi.Device {
	a := attrs{}
	a.str(api.AttrType, api.TypeGPU)
	a.int(api.AttrIndex, g.Index)
	a.str(api.AttrUUID, g.UUID)
	a.bool(api.AttrMIGCapable, g.MIG != nil)
	a.str(string(deviceattribute.StandardDeviceAttributePCIBusID), g.PCIBusID)
	common(a, inv, g)
	if g.IsNVIDIA() {
		topologyAttrs(a, inv, g.Index)
	}
	return resourceapi.Device{
		Name:       GPUDeviceName(g.Index),
		Attributes: a,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			api.CapMemory:          capacity(bytesQuantity(g.MemoryBytes)),
			api.CapMultiprocessors: capacity(*resource.NewQuantity(int64(g.Multiprocessors), resource.DecimalSI)),
			api.CapCompute:         computePercent(100),
		},
		ConsumesCounters: counters.wholeGPU(g.Index),
	}
}

// shareDevice is GPU g's shareable device. Its memory capacity is the card's memory times
// oversubscriptionPPM/1000000 (in whole MiB when oversubscribed); one share asks for at
// most the card's memory. Every share device says whether and how far its node
// oversubscribes memory, so that a selector can keep away from such nodes.
func shareDevice(inv *Inventory, g *GPU, counters counterPlan, oversubscriptionPPM uint64) resourceapi.Device {
	a := attrs{}
	a.str(api.AttrType, api.TypeShare)
	a.int(api.AttrIndex, g.Index)
	a.str(api.AttrUUID, g.UUID)
	a.str(string(deviceattribute.StandardDeviceAttributePCIBusID), g.PCIBusID)
	common(a, inv, g)
	topologyAttrs(a, inv, g.Index)
	mem := bytesQuantity(g.MemoryBytes)
	total := mem
	oversubscribed := oversubscriptionPPM > 1_000_000
	if oversubscribed {
		hi, lo := bits.Mul64(g.MemoryBytes, oversubscriptionPPM)
		b, _ := bits.Div64(hi, lo, 1_000_000) // hi < 1000000: the factor is at most 4
		total = bytesQuantity(b >> 20 << 20)
	}
	a.bool(api.AttrMemoryOversubscribed, oversubscribed)
	a.int(api.AttrMemoryOversubscriptionPercent, int((oversubscriptionPPM+5_000)/10_000))
	return resourceapi.Device{
		Name:                     ShareDeviceName(g.Index),
		Attributes:               a,
		AllowMultipleAllocations: ptr.To(true),
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			api.CapMemory: {
				Value: total,
				RequestPolicy: &resourceapi.CapacityRequestPolicy{
					Default:    ptr.To(ShareMemoryDefault),
					ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(ShareMemoryMin), Max: ptr.To(mem), Step: ptr.To(ShareMemoryStep)},
				},
			},
			api.CapCompute: {
				Value: ShareComputeMax,
				RequestPolicy: &resourceapi.CapacityRequestPolicy{
					Default:    ptr.To(ShareComputeMin),
					ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(ShareComputeMin), Max: ptr.To(ShareComputeMax), Step: ptr.To(ShareComputeStep)},
				},
			},
		},
		ConsumesCounters: counters.wholeGPU(g.Index),
	}
}

// migDevices are GPU g's MIG devices: with static MIG the instances that exist (each GPU
// instance with a compute instance using all of it), otherwise every profile × placement.
func migDevices(inv *Inventory, g *GPU, counters counterPlan, strategy MIGStrategy) []resourceapi.Device {
	var out []resourceapi.Device
	if strategy == MIGStatic {
		for _, mi := range g.MIG.Instances {
			if mi.Full {
				out = append(out, migDevice(inv, g, counters, mi.Profile, mi.Placement, mi.MemoryBytes, mi.Multiprocessors, mi.UUID))
			}
		}
		return out
	}
	for _, p := range g.MIG.Profiles {
		for _, pl := range p.Placements {
			out = append(out, migDevice(inv, g, counters, p.Name, pl, p.MemoryBytes, p.Multiprocessors, ""))
		}
	}
	return out
}

// migDevice is the MIG device of profile at placement pl on GPU g; uuid is set for one
// that exists.
func migDevice(inv *Inventory, g *GPU, counters counterPlan, profile string, pl MIGPlacement, memory uint64, multiprocessors int, uuid string) resourceapi.Device {
	a := attrs{}
	a.str(api.AttrType, api.TypeMIG)
	a.int(api.AttrParentIndex, g.Index)
	a.str(api.AttrParentUUID, g.UUID)
	a.str(api.AttrUUID, uuid)
	a.str(api.AttrMIGProfile, profile)
	a.int(api.AttrMIGPlacementStart, pl.Start)
	a.int(api.AttrMIGPlacementSize, pl.Size)
	common(a, inv, g)
	var slices []string
	for s := pl.Start; s < pl.Start+pl.Size; s++ {
		slices = append(slices, fmt.Sprintf("gpu%d-slice%d", g.Index, s))
	}
	consume, _ := counters.consume(map[int][]string{g.Index: slices})
	if l, ok := counters.limits[g.Index][profile]; ok && uuid == "" {
		consume = append(consume, resourceapi.DeviceCounterConsumption{CounterSet: l.set,
			Counters: map[string]resourceapi.Counter{l.name: {Value: resource.MustParse("1")}}})
	}
	return resourceapi.Device{
		Name:       MIGDeviceName(g.Index, profile, pl.Start),
		Attributes: a,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			api.CapMemory:          capacity(bytesQuantity(memory)),
			api.CapMultiprocessors: capacity(*resource.NewQuantity(int64(multiprocessors), resource.DecimalSI)),
			api.CapCompute:         computePercent(MIGComputePercent(multiprocessors, g.Multiprocessors, memory, g.MemoryBytes)),
		},
		ConsumesCounters: consume,
	}
}

// groupDevice renders an NVLink group. ok is false when a member is not usable as a
// whole GPU (static MIG) or the group spans more counter sets than a device may consume.
func groupDevice(inv *Inventory, gr topology.Group, counters counterPlan, usable map[int]bool) (resourceapi.Device, bool) {
	d, ok := linkedGroup(inv, gr.Members, counters, usable)
	if !ok {
		return d, false
	}
	first := &inv.GPUs[gr.Members[0]]
	a := attrs(d.Attributes)
	a.str(api.AttrType, api.TypeNVLinkGroup)
	a.int(api.AttrNVLinkMinLinks, gr.MinLinks)
	a.str(api.AttrNVLinkFabric, gr.Fabric)
	a.str(api.AttrBrand, first.Brand)
	a.str(api.AttrArchitecture, first.Architecture)
	a.version(api.AttrCUDAComputeCapability, first.CUDAComputeCapability)
	a.version(api.AttrDriverVersion, inv.DriverVersion)
	a.version(api.AttrCUDADriverVersion, inv.CUDADriverVersion)
	if dom := inv.NVLink.Domains()[gr.Members[0]]; dom != nil {
		a.str(api.AttrLinkDomain, "nvlink-"+inv.indexList(dom))
	}
	d.Name = GroupDeviceName(inv.indices(gr.Members))
	return d, true
}

// xgmiGroupDevice renders a group of GPUs of one XGMI hive (members are positions in
// inv.GPUs). ok is false as for groupDevice.
func xgmiGroupDevice(inv *Inventory, members []int, counters counterPlan, usable map[int]bool) (resourceapi.Device, bool) {
	d, ok := linkedGroup(inv, members, counters, usable)
	if !ok {
		return d, false
	}
	k := inv.GPUs[members[0]].KFD
	a := attrs(d.Attributes)
	a.str(api.AttrType, api.TypeXGMIGroup)
	a.str(api.AttrGFXTarget, k.GFXTarget)
	a.str(api.AttrMemoryPartition, k.MemoryPartition)
	a.str(api.AttrXGMIHive, k.XGMIHive)
	a.str(api.AttrLinkDomain, "xgmi-"+k.XGMIHive)
	d.Name = XGMIGroupDeviceName(inv.indices(members))
	return d, true
}

// linkedGroup is what NVLink and XGMI groups publish alike: gpuCount, members, the
// members' vendor and product, the PCIe root and NUMA node they share, capacities, and
// the counters of every member. ok is false when a member is not usable as a whole GPU,
// the members are not all of one product, or they span more counter sets than a device
// may consume.
func linkedGroup(inv *Inventory, members []int, counters counterPlan, usable map[int]bool) (resourceapi.Device, bool) {
	take := map[int][]string{}
	first := &inv.GPUs[members[0]]
	sameRoot, sameNUMA := true, true
	for _, pos := range members {
		g := &inv.GPUs[pos]
		if !usable[g.Index] || g.ProductName != first.ProductName {
			return resourceapi.Device{}, false
		}
		take[g.Index] = counters.names[g.Index]
		sameRoot = sameRoot && g.PCIeRoot == first.PCIeRoot
		sameNUMA = sameNUMA && g.NUMANode != nil && first.NUMANode != nil && *g.NUMANode == *first.NUMANode
	}
	consume, ok := counters.consume(take)
	if !ok {
		return resourceapi.Device{}, false
	}
	a := attrs{}
	a.int(api.AttrGPUCount, len(members))
	a.str(api.AttrMembers, inv.indexList(members))
	a.str(api.AttrVendor, first.VendorOf())
	a.str(api.AttrProductName, first.ProductName)
	if sameRoot && first.PCIeRoot != "" {
		a.str(string(deviceattribute.StandardDeviceAttributePCIeRoot), first.PCIeRoot)
	}
	if sameNUMA {
		a.int(string(deviceattribute.StandardDeviceAttributeNUMANode), *first.NUMANode)
	}
	return resourceapi.Device{
		Attributes: a,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			// memory is per member GPU, so selectors read the same as for one GPU.
			api.CapMemory:          capacity(bytesQuantity(first.MemoryBytes)),
			api.CapMultiprocessors: capacity(*resource.NewQuantity(int64(first.Multiprocessors*len(members)), resource.DecimalSI)),
			api.CapCompute:         computePercent(100 * int64(len(members))),
		},
		ConsumesCounters: consume,
	}, true
}

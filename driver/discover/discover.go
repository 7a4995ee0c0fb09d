package discover

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	nvdev "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/kfd"
	"github.com/gpudra/gpudra/topology"
)

// Discover reads the node's GPUs, MIG options and topology from the backend: NVIDIA's
// through NVML, then AMD's and Hygon's from the KFD topology when the backend has one
// (numbered after NVIDIA's). A GPU that
// NVML lists but cannot read (lost, fallen off the bus, in a bad state) does not fail
// discovery: it goes in Inventory.Unreadable with the call that failed, and is left out
// of GPUs, NVLink and PCIe, so that the node keeps serving its other GPUs. System-level
// failures (driver version, device count) and topology between readable GPUs that NVML
// cannot report are errors. Errors name the GPU and the NVML call that failed.
func Discover(b *Backend) (*driver.Inventory, error) {
	inv := &driver.Inventory{Backend: b.Name}
	if b.NVML != nil {
		var err error
		if inv, err = discoverNVML(b); err != nil {
			return nil, err
		}
	}
	if b.KFD != nil {
		res, err := kfd.Discover(b.KFD)
		if err != nil {
			return nil, err
		}
		inv.AddGPUs(res.GPUs, res.Unreadable)
	}
	return inv, nil
}

// discoverNVML reads the NVIDIA GPUs.
func discoverNVML(b *Backend) (*driver.Inventory, error) {
	lib := b.NVML
	inv := &driver.Inventory{Backend: b.Name}
	var ret nvml.Return
	if inv.DriverVersion, ret = lib.SystemGetDriverVersion(); ret != nvml.SUCCESS {
		return nil, nvmlErr("SystemGetDriverVersion", ret)
	}
	cuda, ret := lib.SystemGetCudaDriverVersion()
	if ret != nvml.SUCCESS {
		return nil, nvmlErr("SystemGetCudaDriverVersion", ret)
	}
	inv.CUDADriverVersion = fmt.Sprintf("%d.%d", cuda/1000, (cuda%1000)/10)
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, nvmlErr("DeviceGetCount", ret)
	}
	var handles []nvml.Device
	var links []gpuLinks
	for i := range count {
		dev, gpu, l, err := discoverIndex(b, i)
		if err != nil {
			inv.Unreadable = append(inv.Unreadable, unreadableGPU(i, err))
			continue
		}
		handles = append(handles, dev)
		links = append(links, l)
		inv.GPUs = append(inv.GPUs, *gpu)
	}
	var err error
	if inv.NVLink, err = nvlinkGraph(inv.GPUs, links); err != nil {
		return nil, err
	}
	if inv.PCIe, err = discoverPCIe(inv.GPUs, handles); err != nil {
		return nil, err
	}
	return inv, nil
}

func unreadableGPU(index int, err error) driver.UnreadableGPU {
	u := driver.UnreadableGPU{Index: index, Reason: err.Error()}
	var e *NVMLError
	if errors.As(err, &e) {
		u.Call, u.Return = e.Call, e.Return.Error()
	}
	return u
}

// discoverIndex reads the GPU at NVML index i: its handle, properties and NVLinks.
func discoverIndex(b *Backend, i int) (nvml.Device, *driver.GPU, gpuLinks, error) {
	dev, ret := b.NVML.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return nil, nil, gpuLinks{}, fmt.Errorf("GPU %d: %w", i, nvmlErr("DeviceGetHandleByIndex", ret))
	}
	gpu, err := discoverGPU(b, dev, i)
	if err != nil {
		return nil, nil, gpuLinks{}, fmt.Errorf("GPU %d: %w", i, err)
	}
	links, err := discoverLinks(dev)
	if err != nil {
		return nil, nil, gpuLinks{}, fmt.Errorf("GPU %d: %w", gpu.Index, err)
	}
	return dev, gpu, links, nil
}

func discoverGPU(b *Backend, dev nvml.Device, i int) (*driver.GPU, error) {
	g := &driver.GPU{Index: i}
	var ret nvml.Return
	if g.Index, ret = dev.GetIndex(); ret != nvml.SUCCESS {
		return nil, nvmlErr("GetIndex", ret)
	}
	if g.Minor, ret = dev.GetMinorNumber(); ret != nvml.SUCCESS {
		return nil, nvmlErr("GetMinorNumber", ret)
	}
	if g.UUID, ret = dev.GetUUID(); ret != nvml.SUCCESS {
		return nil, nvmlErr("GetUUID", ret)
	}
	if g.ProductName, ret = dev.GetName(); ret != nvml.SUCCESS {
		return nil, nvmlErr("GetName", ret)
	}
	if _, ret = dev.GetBrand(); ret != nvml.SUCCESS {
		return nil, nvmlErr("GetBrand", ret)
	}
	if _, ret = dev.GetArchitecture(); ret != nvml.SUCCESS {
		return nil, nvmlErr("GetArchitecture", ret)
	}
	g.Brand, g.Architecture = identityNames(b.NVML, dev)
	major, minor, ret := dev.GetCudaComputeCapability()
	if ret != nvml.SUCCESS {
		return nil, nvmlErr("GetCudaComputeCapability", ret)
	}
	g.CUDAComputeCapability = fmt.Sprintf("%d.%d", major, minor)
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return nil, nvmlErr("GetMemoryInfo", ret)
	}
	g.MemoryBytes = mem.Total
	attrs, ret := dev.GetAttributes()
	if ret != nvml.SUCCESS {
		return nil, nvmlErr("GetAttributes", ret)
	}
	g.Multiprocessors = int(attrs.MultiprocessorCount)
	pci, ret := dev.GetPciInfo()
	if ret != nvml.SUCCESS {
		return nil, nvmlErr("GetPciInfo", ret)
	}
	busID, err := normalizeBusID(pci)
	if err != nil {
		return nil, err
	}
	g.PCIBusID = busID
	var mods []deviceattribute.MachineModifier
	if b.SysFS != nil {
		mods = append(mods, deviceattribute.WithFS(b.SysFS))
	}
	// The PCIe root and NUMA node come from sysfs; a GPU without them is still usable,
	// it just cannot be matched on those attributes.
	if a, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(busID, mods...); err == nil && a.Value.StringValue != nil {
		g.PCIeRoot = *a.Value.StringValue
	}
	if a, err := deviceattribute.GetNUMANodeAttributeByPCIBusID(busID, deviceattribute.ScalarAttribute, mods...); err == nil && a.Value.IntValue != nil {
		n := int(*a.Value.IntValue)
		g.NUMANode = &n
	}
	if g.MIG, err = discoverMIG(dev, g.MemoryBytes); err != nil {
		return nil, err
	}
	if g.MIG != nil && g.MIG.Enabled {
		if g.MIG.Instances, err = migInstances(dev, g); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// normalizeBusID turns NVML's "00000000:1A:00.0" into sysfs' "0000:1a:00.0".
func normalizeBusID(pci nvml.PciInfo) (string, error) {
	raw := int8String(pci.BusId[:])
	if raw == "" {
		raw = int8String(pci.BusIdLegacy[:])
	}
	parts := strings.SplitN(raw, ":", 2)
	if len(parts) != 2 {
		return "", fmt.Errorf("GetPciInfo: bus id %q is not domain:bus:device.function", raw)
	}
	domain := strings.TrimLeft(parts[0], "0")
	for len(domain) < 4 {
		domain = "0" + domain
	}
	return strings.ToLower(domain + ":" + parts[1]), nil
}

func int8String[T int8 | uint8](b []T) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

// ciProfileForSlices maps a GPU instance's slice count to the compute-instance profile
// that uses all of it (the one gpudra publishes).
var ciProfileForSlices = map[int]int{
	1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE,
	2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
	3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE,
	4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE,
	6: nvml.COMPUTE_INSTANCE_PROFILE_6_SLICE,
	7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE,
	8: nvml.COMPUTE_INSTANCE_PROFILE_8_SLICE,
}

func discoverMIG(dev nvml.Device, memBytes uint64) (*driver.MIGInfo, error) {
	current, _, ret := dev.GetMigMode()
	if ret == nvml.ERROR_NOT_SUPPORTED {
		return nil, nil
	}
	if ret != nvml.SUCCESS {
		return nil, nvmlErr("GetMigMode", ret)
	}
	info := &driver.MIGInfo{Enabled: current == nvml.DEVICE_MIG_ENABLE}
	names := nvdev.New(nil)
	for id := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		p, ret := dev.GetGpuInstanceProfileInfo(id)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, nvmlErr(fmt.Sprintf("GetGpuInstanceProfileInfo(%d)", id), ret)
		}
		if p.InstanceCount == 0 {
			continue
		}
		ci, ok := ciProfileForSlices[int(p.SliceCount)]
		if !ok {
			continue
		}
		name, err := names.NewMigProfile(id, ci, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, p.MemorySizeMB, memBytes)
		if err != nil {
			continue // a profile go-nvlib cannot name is one we cannot ask users for
		}
		placements, ret := dev.GetGpuInstancePossiblePlacements(&p)
		if ret != nvml.SUCCESS {
			return nil, nvmlErr(fmt.Sprintf("GetGpuInstancePossiblePlacements(%s)", name), ret)
		}
		prof := driver.MIGProfile{
			Name:            name.String(),
			GIProfileID:     id,
			CIProfileID:     ci,
			ComputeSlices:   int(p.SliceCount),
			MemoryBytes:     p.MemorySizeMB << 20,
			Multiprocessors: int(p.MultiprocessorCount),
			MaxInstances:    int(p.InstanceCount),
		}
		for _, pl := range placements {
			prof.Placements = append(prof.Placements, driver.MIGPlacement{Start: int(pl.Start), Size: int(pl.Size)})
			info.MemorySlices = max(info.MemorySlices, int(pl.Start+pl.Size))
		}
		sort.Slice(prof.Placements, func(a, b int) bool { return prof.Placements[a].Start < prof.Placements[b].Start })
		if len(prof.Placements) > 0 {
			info.Profiles = append(info.Profiles, prof)
		}
	}
	if len(info.Profiles) == 0 {
		return nil, nil
	}
	return info, nil
}

// gpuLinks is where one GPU's NVLinks go: how many to NVSwitches, and the PCI bus id of
// the GPU at the other end of each of the others.
type gpuLinks struct {
	switches int
	peers    []string
}

// discoverLinks walks a GPU's NVLinks.
func discoverLinks(dev nvml.Device) (gpuLinks, error) {
	var out gpuLinks
	for link := range nvml.NVLINK_MAX_LINKS {
		state, ret := dev.GetNvLinkState(link)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			break // no (more) NVLinks on this GPU
		}
		if ret != nvml.SUCCESS {
			return out, nvmlErr(fmt.Sprintf("GetNvLinkState(%d)", link), ret)
		}
		if state != nvml.FEATURE_ENABLED {
			continue
		}
		kind, ret := dev.GetNvLinkRemoteDeviceType(link)
		if ret != nvml.SUCCESS {
			return out, nvmlErr(fmt.Sprintf("GetNvLinkRemoteDeviceType(%d)", link), ret)
		}
		switch kind {
		case nvml.NVLINK_DEVICE_TYPE_SWITCH:
			out.switches++
		case nvml.NVLINK_DEVICE_TYPE_GPU:
			remote, ret := dev.GetNvLinkRemotePciInfo(link)
			if ret != nvml.SUCCESS {
				return out, nvmlErr(fmt.Sprintf("GetNvLinkRemotePciInfo(%d)", link), ret)
			}
			bus, err := normalizeBusID(remote)
			if err != nil {
				return out, fmt.Errorf("link %d: %w", link, err)
			}
			out.peers = append(out.peers, bus)
		}
	}
	return out, nil
}

// nvlinkGraph counts links per pair of GPUs and to NVSwitches, indexed like gpus. Links
// to a GPU that is not among them (one discovery could not read) are left out.
func nvlinkGraph(gpus []driver.GPU, links []gpuLinks) (topology.NVLinkGraph, error) {
	g := topology.NewNVLinkGraph(len(gpus))
	byBus := map[string]int{}
	for k, gpu := range gpus {
		byBus[gpu.PCIBusID] = k
	}
	for k, l := range links {
		g.SwitchLinks[k] += l.switches
		for _, bus := range l.peers {
			if peer, ok := byBus[bus]; ok && peer != k {
				g.Links[k][peer]++
			}
		}
	}
	if err := g.Validate(); err != nil {
		return g, fmt.Errorf("NVLink links reported by NVML disagree between GPUs: %w", err)
	}
	return g, nil
}

// discoverPCIe is the closest PCIe ancestor of each pair of GPUs, indexed like gpus.
func discoverPCIe(gpus []driver.GPU, handles []nvml.Device) ([][]driver.PCIeLevel, error) {
	out := make([][]driver.PCIeLevel, len(handles))
	for i := range handles {
		out[i] = make([]driver.PCIeLevel, len(handles))
		for j := range handles {
			if i == j {
				out[i][j] = driver.PCIeSame
				continue
			}
			lvl, ret := handles[i].GetTopologyCommonAncestor(handles[j])
			if ret == nvml.ERROR_NOT_SUPPORTED {
				out[i][j] = driver.PCIeSystem
				continue
			}
			if ret != nvml.SUCCESS {
				return nil, fmt.Errorf("GPU %d: %w", gpus[i].Index, nvmlErr(fmt.Sprintf("GetTopologyCommonAncestor(GPU %d)", gpus[j].Index), ret))
			}
			out[i][j] = pcieLevel(lvl)
		}
	}
	return out, nil
}

func pcieLevel(l nvml.GpuTopologyLevel) driver.PCIeLevel {
	switch l {
	case nvml.TOPOLOGY_INTERNAL:
		return driver.PCIeSame
	case nvml.TOPOLOGY_SINGLE:
		return driver.PCIeSwitch
	case nvml.TOPOLOGY_MULTIPLE:
		return driver.PCIeSwitches
	case nvml.TOPOLOGY_HOSTBRIDGE:
		return driver.PCIeHostBridge
	case nvml.TOPOLOGY_NODE:
		return driver.PCIeNUMANode
	default:
		return driver.PCIeSystem
	}
}

// identityNames are the GPU's brand and architecture as go-nvlib names them ("Tesla",
// "NvidiaRTX", "Grid"; "Hopper", "Ada Lovelace"), as NVIDIA's own DRA driver publishes them.
// A value newer than go-nvlib knows is "Unknown" rather than a failed discovery.
func identityNames(lib nvml.Interface, dev nvml.Device) (brand, arch string) {
	brand, arch = "Unknown", "Unknown"
	d, err := nvdev.New(lib).NewDevice(dev)
	if err != nil {
		return brand, arch
	}
	if s, err := d.GetBrandAsString(); err == nil {
		brand = s
	}
	if s, err := d.GetArchitectureAsString(); err == nil {
		arch = s
	}
	return brand, arch
}

// NVMLError is a failed NVML call.
type NVMLError struct {
	Call   string
	Return nvml.Return
}

func (e *NVMLError) Error() string {
	return fmt.Sprintf("NVML %s: %s", e.Call, e.Return.Error())
}

func nvmlErr(call string, ret nvml.Return) error { return &NVMLError{Call: call, Return: ret} }

// IsNVMLReturn reports whether err is an NVML failure with the given return code.
func IsNVMLReturn(err error, ret nvml.Return) bool {
	var e *NVMLError
	return errors.As(err, &e) && e.Return == ret
}

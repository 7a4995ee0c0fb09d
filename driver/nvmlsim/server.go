package nvmlsim

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"

	"github.com/google/uuid"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// uuidNamespace scopes simulated GPU UUIDs so they never collide with other SHA-1 UUIDs.
var uuidNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/gpudra/gpudra/driver/nvmlsim"))

// GPUUUID is the UUID simulated GPU index of profile gets on the node seeded with seed.
func GPUUUID(seed, profile string, index int) string {
	return "GPU-" + uuid.NewSHA1(uuidNamespace, fmt.Appendf(nil, "%s\x00%s\x00%d", seed, profile, index)).String()
}

// NewServer builds a fresh simulated server for the profile and the matching sysfs
// view. seed (normally the node name) makes UUIDs stable across restarts and distinct
// between nodes. Every call returns independent state (MIG mode, GPU instances).
func (p *Profile) NewServer(seed string) (nvml.Interface, fs.ReadLinkFS, error) {
	n := p.node
	if n == nil {
		return nil, nil, errors.New("simulated profile was not validated: obtain it from Parse, LoadFile or Builtin")
	}
	configs := gpus.Multiple(n.count, n.gpu)
	var s *server.Server
	if n.base != "" {
		s = baseServers[n.base].new(configs...)
		if n.driverVersion != "" {
			s.DriverVersion, s.NvmlVersion, s.CudaDriverVersion = n.driverVersion, n.nvmlVersion, n.cudaVersion
		}
	} else {
		s = server.NewServerWithGPUs(n.driverVersion, n.nvmlVersion, n.cudaVersion, configs...)
	}
	devices := make([]*server.Device, len(s.Devices))
	for i, d := range s.Devices {
		devices[i] = d.(*server.Device)
	}
	switches := switchAddrs(n)
	for i, d := range devices {
		d.UUID = GPUUUID(seed, n.name, i)
		d.PciBusID = n.gpus[i].addr.String()
		if n.migEnabled {
			d.MigMode = nvml.DEVICE_MIG_ENABLE
		}
		n.wireDevice(d, i, devices, switches)
	}
	wireEvents(s, devices)
	wireProcesses(s, devices)
	s.DeviceGetHandleByPciBusIdFunc = func(busID string) (nvml.Device, nvml.Return) {
		for i, d := range devices {
			if sameBusID(busID, n.gpus[i].addr) {
				return d, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	s.DeviceGetHandleByUUIDFunc = func(id string) (nvml.Device, nvml.Return) {
		for _, d := range devices {
			if d.UUID == id {
				return d, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	return s, newSysFS(n), nil
}

// sameBusID accepts the forms NVML accepts: 8- or 4-digit domain, any case.
func sameBusID(s string, a pciAddr) bool {
	s = strings.ToLower(s)
	return s == a.String() || s == fmt.Sprintf("%08x:%02x:%02x.%x", a.domain, a.bus, a.device, a.function)
}

// wireDevice adds to go-nvml's mock device what it lacks: PCI, NUMA, NVLink and
// topology answers from the profile, and NVML's answers for GPUs without MIG.
func (n *node) wireDevice(d *server.Device, i int, all []*server.Device, switches []pciAddr) {
	slot := n.gpus[i]
	mig := len(d.Config.MIGProfiles.GpuInstanceProfiles) > 0
	d.MemoryInfo = nvml.Memory{Total: d.Config.MemoryMB << 20, Free: d.Config.MemoryMB << 20}

	// Handles from DeviceGetHandleBy* are whole GPUs (nvcdi asks before describing one).
	d.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return false, nvml.SUCCESS }
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		return slot.addr.pciInfo(d.Config.PciDeviceId), nvml.SUCCESS
	}
	d.GetNumaNodeIdFunc = func() (int, nvml.Return) { return slot.numaNode, nvml.SUCCESS }
	d.GetAttributesFunc = func() (nvml.DeviceAttributes, nvml.Return) {
		return nvml.DeviceAttributes{
			MultiprocessorCount: uint32(n.multiprocessors),
			MemorySizeMB:        d.Config.MemoryMB,
		}, nvml.SUCCESS
	}
	d.GetTopologyCommonAncestorFunc = func(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
		o, ok := other.(*server.Device)
		if !ok || o.Index < 0 || o.Index >= len(all) || all[o.Index] != o {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return commonAncestor(slot, n.gpus[o.Index], o == d), nvml.SUCCESS
	}

	// NVLink: links 0..linksPerGPU-1 exist; beyond that NVML rejects the link number.
	link := func(l int) (linkEnd, nvml.Return) {
		switch {
		case n.nvlink.linksPerGPU == 0:
			return linkEnd{}, nvml.ERROR_NOT_SUPPORTED
		case l < 0 || l >= n.nvlink.linksPerGPU:
			return linkEnd{}, nvml.ERROR_INVALID_ARGUMENT
		}
		return n.nvlink.links[i][l], nvml.SUCCESS
	}
	d.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
		end, ret := link(l)
		if ret != nvml.SUCCESS || !end.used() {
			return nvml.FEATURE_DISABLED, ret
		}
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	d.GetNvLinkRemoteDeviceTypeFunc = func(l int) (nvml.IntNvLinkDeviceType, nvml.Return) {
		end, ret := link(l)
		switch {
		case ret != nvml.SUCCESS:
			return nvml.NVLINK_DEVICE_TYPE_UNKNOWN, ret
		case end.gpu >= 0:
			return nvml.NVLINK_DEVICE_TYPE_GPU, nvml.SUCCESS
		case end.nvswitch >= 0:
			return nvml.NVLINK_DEVICE_TYPE_SWITCH, nvml.SUCCESS
		}
		return nvml.NVLINK_DEVICE_TYPE_UNKNOWN, nvml.ERROR_NOT_SUPPORTED
	}
	d.GetNvLinkRemotePciInfoFunc = func(l int) (nvml.PciInfo, nvml.Return) {
		end, ret := link(l)
		switch {
		case ret != nvml.SUCCESS:
			return nvml.PciInfo{}, ret
		case end.gpu >= 0:
			return n.gpus[end.gpu].addr.pciInfo(n.gpu.PciDeviceId), nvml.SUCCESS
		case end.nvswitch >= 0 && end.nvswitch < len(switches):
			return switches[end.nvswitch].pciInfo(n.nvlink.switchDeviceID), nvml.SUCCESS
		}
		return nvml.PciInfo{}, nvml.ERROR_NOT_SUPPORTED
	}

	if !mig {
		d.GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
		d.SetMigModeFunc = func(int) (nvml.Return, nvml.Return) {
			return nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NOT_SUPPORTED
		}
	}
	wireMIG(d, mig)
	wireMIGDevices(d, mig)
}

// wireMIG makes go-nvml's MIG lifecycle refuse what real NVML refuses: MIG calls on
// GPUs without MIG, unknown profiles, placements not offered for the profile and
// placements overlapping an existing GPU instance.
func wireMIG(d *server.Device, mig bool) {
	profiles := d.Config.MIGProfiles
	d.GetGpuInstanceProfileInfoFunc = func(id int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
		if id < 0 || id >= nvml.GPU_INSTANCE_PROFILE_COUNT {
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		info, ok := profiles.GpuInstanceProfiles[id]
		if !ok {
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		return info, nvml.SUCCESS
	}
	d.GetGpuInstancePossiblePlacementsFunc = func(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
		if info == nil {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		placements, ok := profiles.GpuInstancePlacements[int(info.Id)]
		if !mig || !ok {
			return nil, nvml.ERROR_NOT_SUPPORTED
		}
		return append([]nvml.GpuInstancePlacement(nil), placements...), nvml.SUCCESS
	}
	var creating sync.Mutex // makes the overlap check and the creation one step
	createWithPlacement := d.CreateGpuInstanceWithPlacementFunc
	d.CreateGpuInstanceWithPlacementFunc = func(info *nvml.GpuInstanceProfileInfo, placement *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
		switch {
		case !mig:
			return nil, nvml.ERROR_NOT_SUPPORTED
		case info == nil || placement == nil:
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		if mode, _, _ := d.GetMigMode(); mode != nvml.DEVICE_MIG_ENABLE {
			return nil, nvml.ERROR_NOT_SUPPORTED // as nvml.h says for MIG mode disabled
		}
		creating.Lock()
		defer creating.Unlock()
		offered := profiles.GpuInstancePlacements[int(info.Id)]
		if !containsPlacement(offered, *placement) {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		d.RLock()
		for gi := range d.GpuInstances {
			p := gi.Info.Placement
			if placement.Start < p.Start+p.Size && p.Start < placement.Start+placement.Size {
				d.RUnlock()
				return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
			}
		}
		d.RUnlock()
		if atInstanceLimit(d, profiles.GpuInstanceProfiles[int(info.Id)]) {
			return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
		}
		return createWithPlacement(info, placement)
	}
	create := d.CreateGpuInstanceFunc
	d.CreateGpuInstanceFunc = func(info *nvml.GpuInstanceProfileInfo) (nvml.GpuInstance, nvml.Return) {
		if !mig {
			return nil, nvml.ERROR_NOT_SUPPORTED
		}
		if info == nil {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		if mode, _, _ := d.GetMigMode(); mode != nvml.DEVICE_MIG_ENABLE {
			return nil, nvml.ERROR_NOT_SUPPORTED
		}
		creating.Lock()
		defer creating.Unlock()
		if atInstanceLimit(d, profiles.GpuInstanceProfiles[int(info.Id)]) {
			return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
		}
		return create(info)
	}
}

// atInstanceLimit says whether d holds as many GPU instances of the profile as NVML's
// instance count allows: one of a profile with the media engines ("1g.10gb+me"), though
// it has a placement on every slice.
func atInstanceLimit(d *server.Device, profile nvml.GpuInstanceProfileInfo) bool {
	d.RLock()
	defer d.RUnlock()
	n := 0
	for gi := range d.GpuInstances {
		if gi.Info.ProfileId == profile.Id {
			n++
		}
	}
	return n >= int(profile.InstanceCount)
}

func containsPlacement(list []nvml.GpuInstancePlacement, p nvml.GpuInstancePlacement) bool {
	for _, q := range list {
		if q == p {
			return true
		}
	}
	return false
}

package discover

import (
	"cmp"
	"fmt"
	"slices"

	nvdev "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/driver"
)

// MIGInstances reads the MIG devices that exist now on g, a GPU of an earlier
// discovery (its MIG profiles known); nil when g is not MIG-capable or its MIG mode is
// off. The plugin compares them with what it publishes to notice a GPU partitioned
// again while it runs.
func MIGInstances(b *Backend, g *driver.GPU) ([]driver.MIGInstance, error) {
	if g.MIG == nil {
		return nil, nil
	}
	dev, ret := b.NVML.DeviceGetHandleByUUID(g.UUID)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("GPU %d: %w", g.Index, nvmlErr("DeviceGetHandleByUUID", ret))
	}
	mode, _, ret := dev.GetMigMode()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("GPU %d: %w", g.Index, nvmlErr("GetMigMode", ret))
	}
	if mode != nvml.DEVICE_MIG_ENABLE {
		return nil, nil
	}
	out, err := migInstances(dev, g)
	if err != nil {
		return nil, fmt.Errorf("GPU %d: %w", g.Index, err)
	}
	return out, nil
}

// migDeviceInfo is what a MIG device handle tells about one compute instance.
type migDeviceInfo struct {
	uuid            string
	memoryBytes     uint64
	multiprocessors int
}

// migInstances lists every compute instance of every GPU instance of g's MIG profiles.
// UUID, memory and multiprocessors come from the MIG device handles; where NVML has
// none for an instance, the UUID is the "MIG-<GPU UUID>/<gi>/<ci>" form
// NVIDIA_VISIBLE_DEVICES also accepts and the rest comes from the profiles.
func migInstances(dev nvml.Device, g *driver.GPU) ([]driver.MIGInstance, error) {
	handles := migDeviceHandles(dev)
	names := nvdev.New(nil)
	var out []driver.MIGInstance
	for _, p := range g.MIG.Profiles {
		info, ret := dev.GetGpuInstanceProfileInfo(p.GIProfileID)
		if ret != nvml.SUCCESS {
			return nil, nvmlErr(fmt.Sprintf("GetGpuInstanceProfileInfo(%s)", p.Name), ret)
		}
		gis, ret := dev.GetGpuInstances(&info)
		if ret == nvml.ERROR_NOT_SUPPORTED { // MIG mode off (or a change pending)
			return nil, nil
		}
		if ret != nvml.SUCCESS {
			return nil, nvmlErr(fmt.Sprintf("GetGpuInstances(%s)", p.Name), ret)
		}
		for _, gi := range gis {
			giInfo, ret := gi.GetInfo()
			if ret != nvml.SUCCESS {
				return nil, nvmlErr("GpuInstance.GetInfo", ret)
			}
			for ciProfile := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
				ciInfo, ret := gi.GetComputeInstanceProfileInfo(ciProfile, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
				if ret != nvml.SUCCESS {
					continue // a compute instance profile this GPU instance does not offer
				}
				cis, ret := gi.GetComputeInstances(&ciInfo)
				if ret != nvml.SUCCESS {
					return nil, nvmlErr(fmt.Sprintf("GetComputeInstances(%s, %d)", p.Name, ciProfile), ret)
				}
				for _, ci := range cis {
					ciData, ret := ci.GetInfo()
					if ret != nvml.SUCCESS {
						return nil, nvmlErr("ComputeInstance.GetInfo", ret)
					}
					mi := driver.MIGInstance{
						Profile:         p.Name,
						GIProfileID:     p.GIProfileID,
						CIProfileID:     ciProfile,
						Full:            ciProfile == p.CIProfileID,
						Placement:       driver.MIGPlacement{Start: int(giInfo.Placement.Start), Size: int(giInfo.Placement.Size)},
						GIID:            int(giInfo.Id),
						CIID:            int(ciData.Id),
						UUID:            fmt.Sprintf("MIG-%s/%d/%d", g.UUID, giInfo.Id, ciData.Id),
						MemoryBytes:     p.MemoryBytes,
						Multiprocessors: int(ciInfo.MultiprocessorCount),
					}
					if !mi.Full {
						name, err := names.NewMigProfile(p.GIProfileID, ciProfile, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, info.MemorySizeMB, g.MemoryBytes)
						if err != nil {
							return nil, fmt.Errorf("naming the compute instance %d of the %s GPU instance at %d: %w", ciData.Id, p.Name, mi.Placement.Start, err)
						}
						mi.Profile = name.String()
					}
					if h, ok := handles[[2]int{mi.GIID, mi.CIID}]; ok {
						mi.UUID = h.uuid
						mi.MemoryBytes = cmp.Or(h.memoryBytes, mi.MemoryBytes)
						mi.Multiprocessors = cmp.Or(h.multiprocessors, mi.Multiprocessors)
					}
					out = append(out, mi)
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b driver.MIGInstance) int {
		return cmp.Or(cmp.Compare(a.Placement.Start, b.Placement.Start), cmp.Compare(a.GIID, b.GIID), cmp.Compare(a.CIID, b.CIID))
	})
	return out, nil
}

// MIGDeviceUUID is the UUID NVML reports for the MIG device of GPU instance gi and compute
// instance ci of dev; false when NVML has no such MIG device handle.
func MIGDeviceUUID(dev nvml.Device, gi, ci int) (string, bool) {
	info, ok := migDeviceHandles(dev)[[2]int{gi, ci}]
	return info.uuid, ok
}

// migDeviceHandles reads the GPU's MIG device handles, by GPU and compute instance id;
// empty when NVML has none.
func migDeviceHandles(dev nvml.Device) map[[2]int]migDeviceInfo {
	out := map[[2]int]migDeviceInfo{}
	count, ret := dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return out
	}
	for k := range count {
		md, ret := dev.GetMigDeviceHandleByIndex(k)
		if ret != nvml.SUCCESS {
			continue
		}
		gi, r1 := md.GetGpuInstanceId()
		ci, r2 := md.GetComputeInstanceId()
		id, r3 := md.GetUUID()
		if r1 != nvml.SUCCESS || r2 != nvml.SUCCESS || r3 != nvml.SUCCESS {
			continue
		}
		info := migDeviceInfo{uuid: id}
		if mem, ret := md.GetMemoryInfo(); ret == nvml.SUCCESS {
			info.memoryBytes = mem.Total
		}
		if a, ret := md.GetAttributes(); ret == nvml.SUCCESS {
			info.multiprocessors = int(a.MultiprocessorCount)
		}
		out[[2]int{gi, ci}] = info
	}
	return out
}

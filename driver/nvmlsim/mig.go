package nvmlsim

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	nvdev "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/uuid"
)

// MIGDeviceUUID is the UUID of the simulated MIG device made of GPU instance gi and
// compute instance ci on the GPU with UUID gpuUUID.
func MIGDeviceUUID(gpuUUID string, gi, ci int) string {
	return "MIG-" + uuid.NewSHA1(uuidNamespace, fmt.Appendf(nil, "%s\x00%d\x00%d", gpuUUID, gi, ci)).String()
}

// migPair is one existing compute instance with its GPU instance.
type migPair struct {
	gi *server.GpuInstance
	ci *server.ComputeInstance
}

// migPairs are the GPU's compute instances, ordered by GPU instance id, then compute
// instance id: the order of NVML's MIG device indices.
func migPairs(d *server.Device) []migPair {
	d.RLock()
	gis := make([]*server.GpuInstance, 0, len(d.GpuInstances))
	for gi := range d.GpuInstances {
		gis = append(gis, gi)
	}
	d.RUnlock()
	slices.SortFunc(gis, func(a, b *server.GpuInstance) int { return cmp.Compare(a.Info.Id, b.Info.Id) })
	var out []migPair
	for _, gi := range gis {
		gi.RLock()
		cis := make([]*server.ComputeInstance, 0, len(gi.ComputeInstances))
		for ci := range gi.ComputeInstances {
			cis = append(cis, ci)
		}
		gi.RUnlock()
		slices.SortFunc(cis, func(a, b *server.ComputeInstance) int { return cmp.Compare(a.Info.Id, b.Info.Id) })
		for _, ci := range cis {
			out = append(out, migPair{gi, ci})
		}
	}
	return out
}

// wireMIGDevices gives a MIG-capable GPU NVML's MIG device handles: one per compute
// instance, with its UUID, memory and multiprocessors.
func wireMIGDevices(d *server.Device, mig bool) {
	if !mig {
		d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		d.GetMigDeviceHandleByIndexFunc = func(int) (nvml.Device, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
		return
	}
	maxCount := 0
	for _, p := range d.Config.MIGProfiles.GpuInstanceProfiles {
		maxCount = max(maxCount, int(p.InstanceCount))
	}
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return maxCount, nvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(k int) (nvml.Device, nvml.Return) {
		if k < 0 || k >= maxCount {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		pairs := migPairs(d)
		if k >= len(pairs) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return migDevice(d, pairs[k]), nvml.SUCCESS
	}
}

// migDevice is the MIG device handle of one compute instance.
func migDevice(parent *server.Device, p migPair) nvml.Device {
	giProfile := parent.Config.MIGProfiles.GpuInstanceProfiles[int(p.gi.Info.ProfileId)]
	ciProfile := parent.Config.MIGProfiles.ComputeInstanceProfiles[int(p.gi.Info.ProfileId)][int(p.ci.Info.ProfileId)]
	sms := int(ciProfile.MultiprocessorCount)
	mem := giProfile.MemorySizeMB << 20
	gi, ci := int(p.gi.Info.Id), int(p.ci.Info.Id)
	return &mock.Device{
		IsMigDeviceHandleFunc:                  func() (bool, nvml.Return) { return true, nvml.SUCCESS },
		GetDeviceHandleFromMigDeviceHandleFunc: func() (nvml.Device, nvml.Return) { return parent, nvml.SUCCESS },
		GetUUIDFunc:                            func() (string, nvml.Return) { return MIGDeviceUUID(parent.UUID, gi, ci), nvml.SUCCESS },
		GetGpuInstanceIdFunc:                   func() (int, nvml.Return) { return gi, nvml.SUCCESS },
		GetComputeInstanceIdFunc:               func() (int, nvml.Return) { return ci, nvml.SUCCESS },
		GetMemoryInfoFunc:                      func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: mem, Free: mem}, nvml.SUCCESS },
		GetAttributesFunc: func() (nvml.DeviceAttributes, nvml.Return) {
			return nvml.DeviceAttributes{
				MultiprocessorCount:       uint32(sms),
				GpuInstanceSliceCount:     giProfile.SliceCount,
				ComputeInstanceSliceCount: ciProfile.SliceCount,
				MemorySizeMB:              giProfile.MemorySizeMB,
			}, nvml.SUCCESS
		},
	}
}

// PartitionMIG partitions simulated GPU gpu as nvidia-smi mig -cgi <profiles> -C does,
// or NVIDIA's mig-manager applying a layout: it enables MIG mode if it is off and makes
// one GPU instance per profile name ("1g.10gb", "3g.40gb", ...), each with a compute
// instance using all of it. Each goes at the highest free placement its profile offers,
// so that a mixed layout listed largest first fits the way mig-manager's do.
func PartitionMIG(lib nvml.Interface, gpu int, profiles ...string) error {
	dev, ret := lib.DeviceGetHandleByIndex(gpu)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("GPU %d: DeviceGetHandleByIndex: %v", gpu, ret)
	}
	if mode, _, ret := dev.GetMigMode(); ret != nvml.SUCCESS {
		return fmt.Errorf("GPU %d: GetMigMode: %v", gpu, ret)
	} else if mode != nvml.DEVICE_MIG_ENABLE {
		if ret, _ := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
			return fmt.Errorf("GPU %d: SetMigMode: %v", gpu, ret)
		}
	}
	for _, name := range profiles {
		info, ciProfile, err := migProfileByName(dev, name)
		if err != nil {
			return fmt.Errorf("GPU %d: %w", gpu, err)
		}
		placements, ret := dev.GetGpuInstancePossiblePlacements(&info)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("GPU %d: GetGpuInstancePossiblePlacements(%s): %v", gpu, name, ret)
		}
		slices.SortFunc(placements, func(a, b nvml.GpuInstancePlacement) int { return cmp.Compare(b.Start, a.Start) })
		var gi nvml.GpuInstance
		for _, pl := range placements {
			if gi, ret = dev.CreateGpuInstanceWithPlacement(&info, &pl); ret == nvml.SUCCESS {
				break
			}
		}
		if gi == nil {
			return fmt.Errorf("GPU %d: no free placement for a %s GPU instance", gpu, name)
		}
		ciInfo, ret := gi.GetComputeInstanceProfileInfo(ciProfile, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("GPU %d: %s: GetComputeInstanceProfileInfo: %v", gpu, name, ret)
		}
		if _, ret := gi.CreateComputeInstance(&ciInfo); ret != nvml.SUCCESS {
			return fmt.Errorf("GPU %d: %s: CreateComputeInstance: %v", gpu, name, ret)
		}
	}
	return nil
}

// simFullCI maps a GPU instance's slice count to the compute instance
// profile that uses all of it.
var simFullCI = map[uint32]int{
	1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE,
	2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
	3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE,
	4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE,
	6: nvml.COMPUTE_INSTANCE_PROFILE_6_SLICE,
	7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE,
	8: nvml.COMPUTE_INSTANCE_PROFILE_8_SLICE,
}

// migProfileByName finds the GPU instance profile NVIDIA names name on dev, and the
// compute instance profile that uses all of it.
func migProfileByName(dev nvml.Device, name string) (nvml.GpuInstanceProfileInfo, int, error) {
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return nvml.GpuInstanceProfileInfo{}, 0, fmt.Errorf("GetMemoryInfo: %v", ret)
	}
	namer := nvdev.New(nil)
	var known []string
	for id := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := dev.GetGpuInstanceProfileInfo(id)
		if ret != nvml.SUCCESS || info.InstanceCount == 0 {
			continue
		}
		ci, ok := simFullCI[info.SliceCount]
		if !ok {
			continue
		}
		p, err := namer.NewMigProfile(id, ci, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, info.MemorySizeMB, mem.Total)
		if err != nil {
			continue
		}
		if p.String() == name {
			return info, ci, nil
		}
		known = append(known, p.String())
	}
	return nvml.GpuInstanceProfileInfo{}, 0, fmt.Errorf("no MIG profile %q; the GPU offers %s", name, strings.Join(known, ", "))
}

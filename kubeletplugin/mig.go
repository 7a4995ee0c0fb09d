package kubeletplugin

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/discover"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// migInstances creates and destroys MIG instances through NVML. Instances are found by
// GPU, profile and placement, never by remembered ids, so that a plugin that died
// between creating an instance and recording it still finds the instance.
//
// With adopt (static MIG) the GPUs' instances are the operator's: create hands out the
// existing instance at the device's placement, destroy leaves it, and nothing is ever
// created or destroyed.
type migInstances struct {
	backend *discover.Backend
	inv     *driver.Inventory
	hook    Hook
	adopt   bool
}

// created is a GPU instance with its compute instance.
type created struct {
	GI, CI int
	UUID   string
}

func (m migInstances) device(index int) (nvml.Device, error) {
	dev, ret := m.backend.NVML.DeviceGetHandleByIndex(index)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("GPU %d: DeviceGetHandleByIndex: %v", index, ret)
	}
	return dev, nil
}

// setMode switches a MIG-capable GPU's MIG mode; it refuses while instances exist.
func (m migInstances) setMode(index int, enabled bool) error {
	g := m.inv.GPU(index)
	if g == nil || g.MIG == nil {
		return nil
	}
	dev, err := m.device(index)
	if err != nil {
		return err
	}
	current, _, ret := dev.GetMigMode()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("GPU %d: GetMigMode: %v", index, ret)
	}
	want := nvml.DEVICE_MIG_DISABLE
	if enabled {
		want = nvml.DEVICE_MIG_ENABLE
	}
	if current == want {
		return nil
	}
	if list, err := m.list(index); err != nil {
		return err
	} else if len(list) > 0 {
		return fmt.Errorf("GPU %d: cannot change MIG mode while %d MIG instances exist", index, len(list))
	}
	if ret, _ := dev.SetMigMode(want); ret != nvml.SUCCESS {
		return fmt.Errorf("GPU %d: SetMigMode(%d): %v", index, want, ret)
	}
	return nil
}

// create makes the GPU instance of mi at its placement and a full compute instance; with
// adopt it returns the existing one instead.
func (m migInstances) create(mi *prepared.MIGInstance) (created, error) {
	if m.adopt {
		return m.existing(mi)
	}
	dev, err := m.device(mi.Parent)
	if err != nil {
		return created{}, err
	}
	where := fmt.Sprintf("GPU %d: MIG %s at %d", mi.Parent, mi.Profile, mi.Start)
	info, ret := dev.GetGpuInstanceProfileInfo(mi.GIProfileID)
	if ret != nvml.SUCCESS {
		return created{}, fmt.Errorf("%s: GetGpuInstanceProfileInfo: %v", where, ret)
	}
	gi, ret := dev.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(mi.Start), Size: uint32(mi.Size)})
	if ret != nvml.SUCCESS {
		return created{}, fmt.Errorf("%s: CreateGpuInstanceWithPlacement: %v", where, ret)
	}
	fail := func(step string, ret nvml.Return) (created, error) {
		_ = gi.Destroy()
		return created{}, fmt.Errorf("%s: %s: %v", where, step, ret)
	}
	if err := m.hook.At(PointMIGInstanceCreated); err != nil {
		_ = gi.Destroy()
		return created{}, err
	}
	ciInfo, ret := gi.GetComputeInstanceProfileInfo(mi.CIProfileID, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		return fail("GetComputeInstanceProfileInfo", ret)
	}
	ci, ret := gi.CreateComputeInstance(&ciInfo)
	if ret != nvml.SUCCESS {
		return fail("CreateComputeInstance", ret)
	}
	giData, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		return fail("GpuInstance.GetInfo", ret)
	}
	ciData, ret := ci.GetInfo()
	if ret != nvml.SUCCESS {
		return fail("ComputeInstance.GetInfo", ret)
	}
	out := created{GI: int(giData.Id), CI: int(ciData.Id)}
	out.UUID = m.migUUID(dev, mi.Parent, out)
	return out, nil
}

// migUUID is the MIG device's UUID from NVML, or the "MIG-<GPU UUID>/<gi>/<ci>" form
// NVIDIA_VISIBLE_DEVICES also accepts (simulated servers have no MIG device handles).
func (m migInstances) migUUID(dev nvml.Device, parent int, c created) string {
	legacy := fmt.Sprintf("MIG-%s/%d/%d", m.inv.GPU(parent).UUID, c.GI, c.CI)
	if m.backend.Simulated {
		return legacy
	}
	if id, ok := discover.MIGDeviceUUID(dev, c.GI, c.CI); ok {
		return id
	}
	return legacy
}

// existing is a GPU instance found on a GPU.
type existing struct {
	gi          nvml.GpuInstance
	giProfileID int
	start, size int
}

// list returns the GPU instances of every profile the GPU offers.
func (m migInstances) list(index int) ([]existing, error) {
	g := m.inv.GPU(index)
	if g == nil || g.MIG == nil {
		return nil, nil
	}
	dev, err := m.device(index)
	if err != nil {
		return nil, err
	}
	var out []existing
	for _, p := range g.MIG.Profiles {
		info, ret := dev.GetGpuInstanceProfileInfo(p.GIProfileID)
		if ret != nvml.SUCCESS {
			continue
		}
		gis, ret := dev.GetGpuInstances(&info)
		if ret == nvml.ERROR_NOT_SUPPORTED { // MIG mode off
			return nil, nil
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %d: GetGpuInstances(%s): %v", index, p.Name, ret)
		}
		for _, gi := range gis {
			d, ret := gi.GetInfo()
			if ret != nvml.SUCCESS {
				return nil, fmt.Errorf("GPU %d: GpuInstance.GetInfo: %v", index, ret)
			}
			out = append(out, existing{gi: gi, giProfileID: p.GIProfileID, start: int(d.Placement.Start), size: int(d.Placement.Size)})
		}
	}
	return out, nil
}

// occupant is a GPU instance on mi's GPU whose placement overlaps mi's, nil when the
// placement is free.
func (m migInstances) occupant(mi *prepared.MIGInstance) (*existing, error) {
	if m.adopt { // the instance must be there, and is the claim's to use
		_, err := m.existing(mi)
		return nil, err
	}
	list, err := m.list(mi.Parent)
	if err != nil {
		return nil, err
	}
	for _, e := range list {
		if e.start < mi.Start+mi.Size && mi.Start < e.start+e.size {
			return &e, nil
		}
	}
	return nil, nil
}

// destroy removes mi's GPU instance (and its compute instances) if it exists; with
// adopt it leaves it.
func (m migInstances) destroy(mi *prepared.MIGInstance) error {
	if m.adopt {
		return nil
	}
	list, err := m.list(mi.Parent)
	if err != nil {
		return err
	}
	for _, e := range list {
		if e.giProfileID == mi.GIProfileID && e.start == mi.Start {
			return m.destroyInstance(mi.Parent, e)
		}
	}
	return nil
}

func (m migInstances) destroyInstance(index int, e existing) error {
	g := m.inv.GPU(index)
	for _, p := range g.MIG.Profiles {
		if p.GIProfileID != e.giProfileID {
			continue
		}
		if ciInfo, ret := e.gi.GetComputeInstanceProfileInfo(p.CIProfileID, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED); ret == nvml.SUCCESS {
			cis, _ := e.gi.GetComputeInstances(&ciInfo)
			for _, ci := range cis {
				if ret := ci.Destroy(); ret != nvml.SUCCESS {
					return fmt.Errorf("GPU %d: destroying compute instance at %d: %v", index, e.start, ret)
				}
			}
		}
	}
	if ret := e.gi.Destroy(); ret != nvml.SUCCESS {
		return fmt.Errorf("GPU %d: destroying GPU instance at %d: %v", index, e.start, ret)
	}
	return nil
}

// existing finds the GPU instance of mi's profile at mi's placement and its compute
// instance using all of it, as they exist on the GPU (static MIG).
func (m migInstances) existing(mi *prepared.MIGInstance) (created, error) {
	where := fmt.Sprintf("GPU %d: MIG %s at %d", mi.Parent, mi.Profile, mi.Start)
	list, err := m.list(mi.Parent)
	if err != nil {
		return created{}, err
	}
	for _, e := range list {
		if e.giProfileID != mi.GIProfileID || e.start != mi.Start {
			continue
		}
		giData, ret := e.gi.GetInfo()
		if ret != nvml.SUCCESS {
			return created{}, fmt.Errorf("%s: GpuInstance.GetInfo: %v", where, ret)
		}
		ciInfo, ret := e.gi.GetComputeInstanceProfileInfo(mi.CIProfileID, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			return created{}, fmt.Errorf("%s: GetComputeInstanceProfileInfo: %v", where, ret)
		}
		cis, ret := e.gi.GetComputeInstances(&ciInfo)
		if ret != nvml.SUCCESS {
			return created{}, fmt.Errorf("%s: GetComputeInstances: %v", where, ret)
		}
		if len(cis) == 0 {
			return created{}, fmt.Errorf("%s: the GPU instance has no compute instance using all of it (with --mig=static the plugin creates none)", where)
		}
		ciData, ret := cis[0].GetInfo()
		if ret != nvml.SUCCESS {
			return created{}, fmt.Errorf("%s: ComputeInstance.GetInfo: %v", where, ret)
		}
		c := created{GI: int(giData.Id), CI: int(ciData.Id)}
		c.UUID = m.existingUUID(mi.Parent, c)
		return c, nil
	}
	return created{}, fmt.Errorf("%s: the MIG instance does not exist any more (destroyed, or the GPU partitioned again, since the node published it); with --mig=static the plugin hands out existing instances and creates none", where)
}

// existingUUID is an existing MIG device's UUID: as discovery read it, else from NVML's
// MIG device handles, else the "MIG-<GPU UUID>/<gi>/<ci>" form.
func (m migInstances) existingUUID(parent int, c created) string {
	g := m.inv.GPU(parent)
	if g.MIG != nil {
		for _, in := range g.MIG.Instances {
			if in.GIID == c.GI && in.CIID == c.CI {
				return in.UUID
			}
		}
	}
	legacy := fmt.Sprintf("MIG-%s/%d/%d", g.UUID, c.GI, c.CI)
	dev, err := m.device(parent)
	if err != nil {
		return legacy
	}
	if id, ok := discover.MIGDeviceUUID(dev, c.GI, c.CI); ok {
		return id
	}
	return legacy
}

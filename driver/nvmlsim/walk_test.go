package nvmlsim

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// gpuView is what discovery reads about one GPU.
type gpuView struct {
	index, minor    int
	uuid, name      string
	brand           nvml.BrandType
	arch            nvml.DeviceArchitecture
	ccMajor         int
	ccMinor         int
	memoryBytes     uint64
	multiprocessors uint32
	busID           string
	busIDLegacy     string
	pciDeviceID     uint32
	numaNode        int
	migCapable      bool
	migProfiles     int // GPU instance profiles with placements
	links           []linkView
}

type linkView struct {
	kind nvml.IntNvLinkDeviceType
	peer string // remote PCI bus id
}

func open(t *testing.T, name, seed string) nvml.Interface {
	t.Helper()
	srv, _, err := Open(name, seed)
	if err != nil {
		t.Fatalf("Open(%q): %v", name, err)
	}
	if ret := srv.Init(); ret != nvml.SUCCESS {
		t.Fatalf("Init: %v", ret)
	}
	return srv
}

// walk reads every GPU through the NVML calls discovery makes, failing on any
// call that does not answer like real NVML.
func walk(t *testing.T, srv nvml.Interface) []gpuView {
	t.Helper()
	count, ret := srv.DeviceGetCount()
	if ret != nvml.SUCCESS {
		t.Fatalf("DeviceGetCount: %v", ret)
	}
	var views []gpuView
	for i := range count {
		d, ret := srv.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			t.Fatalf("DeviceGetHandleByIndex(%d): %v", i, ret)
		}
		var v gpuView
		must := func(call string, ret nvml.Return) {
			t.Helper()
			if ret != nvml.SUCCESS {
				t.Fatalf("GPU %d %s: %v", i, call, ret)
			}
		}
		v.index, ret = d.GetIndex()
		must("GetIndex", ret)
		v.minor, ret = d.GetMinorNumber()
		must("GetMinorNumber", ret)
		v.uuid, ret = d.GetUUID()
		must("GetUUID", ret)
		v.name, ret = d.GetName()
		must("GetName", ret)
		v.brand, ret = d.GetBrand()
		must("GetBrand", ret)
		v.arch, ret = d.GetArchitecture()
		must("GetArchitecture", ret)
		v.ccMajor, v.ccMinor, ret = d.GetCudaComputeCapability()
		must("GetCudaComputeCapability", ret)
		mem, ret := d.GetMemoryInfo()
		must("GetMemoryInfo", ret)
		v.memoryBytes = mem.Total
		attrs, ret := d.GetAttributes()
		must("GetAttributes", ret)
		v.multiprocessors = attrs.MultiprocessorCount
		pci, ret := d.GetPciInfo()
		must("GetPciInfo", ret)
		v.busID, v.busIDLegacy, v.pciDeviceID = cString(pci.BusId[:]), cString(pci.BusIdLegacy[:]), pci.PciDeviceId
		v.numaNode, ret = d.GetNumaNodeId()
		must("GetNumaNodeId", ret)

		_, _, ret = d.GetMigMode()
		v.migCapable = ret == nvml.SUCCESS
		if ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_SUPPORTED {
			t.Fatalf("GPU %d GetMigMode: %v", i, ret)
		}
		for id := range nvml.GPU_INSTANCE_PROFILE_COUNT {
			info, ret := d.GetGpuInstanceProfileInfo(id)
			if ret == nvml.ERROR_NOT_SUPPORTED {
				continue
			}
			must("GetGpuInstanceProfileInfo", ret)
			placements, ret := d.GetGpuInstancePossiblePlacements(&info)
			must("GetGpuInstancePossiblePlacements", ret)
			if len(placements) > 0 {
				v.migProfiles++
			}
		}

		for l := range nvml.NVLINK_MAX_LINKS {
			state, ret := d.GetNvLinkState(l)
			if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
				break
			}
			must("GetNvLinkState", ret)
			if state != nvml.FEATURE_ENABLED {
				continue
			}
			kind, ret := d.GetNvLinkRemoteDeviceType(l)
			must("GetNvLinkRemoteDeviceType", ret)
			remote, ret := d.GetNvLinkRemotePciInfo(l)
			must("GetNvLinkRemotePciInfo", ret)
			v.links = append(v.links, linkView{kind: kind, peer: cString(remote.BusId[:])})
		}
		if _, ret := d.GetNvLinkState(nvml.NVLINK_MAX_LINKS); ret != nvml.ERROR_INVALID_ARGUMENT && ret != nvml.ERROR_NOT_SUPPORTED {
			t.Fatalf("GPU %d GetNvLinkState(NVLINK_MAX_LINKS) = %v, want ERROR_INVALID_ARGUMENT", i, ret)
		}
		views = append(views, v)
	}
	return views
}

func cString(b []int8) string {
	var s strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		s.WriteByte(byte(c))
	}
	return s.String()
}

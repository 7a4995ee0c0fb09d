package nvmlsim

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestBuiltinProfilesReportTheirGPUs(t *testing.T) {
	tests := []struct {
		profile         string
		count           int
		name            string
		brand           nvml.BrandType
		arch            nvml.DeviceArchitecture
		cc              [2]int
		memoryMiB       uint64
		multiprocessors uint32
		driver          string
		cuda            int
		mig             bool
		linksPerGPU     int
		peer            nvml.IntNvLinkDeviceType
	}{
		{"dgx-v100", 8, "Tesla V100-SXM2-32GB", nvml.BRAND_TESLA, nvml.DEVICE_ARCH_VOLTA, [2]int{7, 0}, 32768, 80, "535.161.08", 12020, false, 6, nvml.NVLINK_DEVICE_TYPE_GPU},
		{"l40s-pcie", 8, "NVIDIA L40S", nvml.BRAND_NVIDIA, nvml.DEVICE_ARCH_ADA, [2]int{8, 9}, 46068, 142, "550.90.07", 12040, false, 0, 0},
		{"dgx-a100", 8, "NVIDIA A100-SXM4-40GB", nvml.BRAND_NVIDIA, nvml.DEVICE_ARCH_AMPERE, [2]int{8, 0}, 40960, 108, "550.54.15", 12040, true, 12, nvml.NVLINK_DEVICE_TYPE_SWITCH},
		{"hgx-a100-4gpu", 4, "NVIDIA A100-SXM4-80GB", nvml.BRAND_NVIDIA, nvml.DEVICE_ARCH_AMPERE, [2]int{8, 0}, 81920, 108, "550.54.15", 12040, true, 12, nvml.NVLINK_DEVICE_TYPE_GPU},
		{"dgx-h100", 8, "NVIDIA H100 80GB HBM3", nvml.BRAND_NVIDIA, nvml.DEVICE_ARCH_HOPPER, [2]int{9, 0}, 81920, 132, "550.54.15", 12040, true, 18, nvml.NVLINK_DEVICE_TYPE_SWITCH},
	}
	for _, tc := range tests {
		t.Run(tc.profile, func(t *testing.T) {
			srv := open(t, tc.profile, "node-a")
			if v, _ := srv.SystemGetDriverVersion(); v != tc.driver {
				t.Errorf("driver version = %q, want %q", v, tc.driver)
			}
			if v, _ := srv.SystemGetCudaDriverVersion(); v != tc.cuda {
				t.Errorf("CUDA driver version = %d, want %d", v, tc.cuda)
			}
			if v, ret := srv.SystemGetNVMLVersion(); ret != nvml.SUCCESS || v == "" {
				t.Errorf("NVML version = %q, %v", v, ret)
			}
			views := walk(t, srv)
			if len(views) != tc.count {
				t.Fatalf("%d GPUs, want %d", len(views), tc.count)
			}
			busIDs := map[string]bool{}
			for i, v := range views {
				if v.index != i || v.minor != i {
					t.Errorf("GPU %d: index %d minor %d", i, v.index, v.minor)
				}
				if v.name != tc.name || v.brand != tc.brand || v.arch != tc.arch || [2]int{v.ccMajor, v.ccMinor} != tc.cc {
					t.Errorf("GPU %d: %q brand %v arch %v cc %d.%d, want %q %v %v %v", i, v.name, v.brand, v.arch, v.ccMajor, v.ccMinor, tc.name, tc.brand, tc.arch, tc.cc)
				}
				if v.memoryBytes != tc.memoryMiB<<20 || v.multiprocessors != tc.multiprocessors {
					t.Errorf("GPU %d: memory %d SMs %d, want %d MiB, %d SMs", i, v.memoryBytes, v.multiprocessors, tc.memoryMiB, tc.multiprocessors)
				}
				if v.migCapable != tc.mig || (v.migProfiles > 0) != tc.mig {
					t.Errorf("GPU %d: MIG capable %v with %d placeable profiles, want MIG %v", i, v.migCapable, v.migProfiles, tc.mig)
				}
				if !strings.HasPrefix(v.uuid, "GPU-") || len(v.uuid) != 40 {
					t.Errorf("GPU %d: UUID %q is not GPU-<uuid>", i, v.uuid)
				}
				if len(v.busID) != 16 || v.busID != strings.ToUpper(v.busID) || v.busIDLegacy != v.busID[4:] {
					t.Errorf("GPU %d: bus id %q legacy %q, want 00000000:BB:DD.F and 0000:BB:DD.F", i, v.busID, v.busIDLegacy)
				}
				if busIDs[v.busID] {
					t.Errorf("GPU %d: bus id %s used twice", i, v.busID)
				}
				busIDs[v.busID] = true
				if v.pciDeviceID&0xffff != 0x10de {
					t.Errorf("GPU %d: PCI device id %#x has no NVIDIA vendor id", i, v.pciDeviceID)
				}
				if len(v.links) != tc.linksPerGPU {
					t.Errorf("GPU %d: %d active NVLinks, want %d", i, len(v.links), tc.linksPerGPU)
				}
				for l, link := range v.links {
					if link.kind != tc.peer {
						t.Errorf("GPU %d link %d: remote type %v, want %v", i, l, link.kind, tc.peer)
					}
				}
			}
		})
	}
}

// dgxV100Links is the DGX-1 V100 hybrid cube-mesh: NVLinks per GPU pair.
var dgxV100Links = [8][8]int{
	{0, 1, 1, 2, 2, 0, 0, 0},
	{1, 0, 2, 1, 0, 2, 0, 0},
	{1, 2, 0, 2, 0, 0, 1, 0},
	{2, 1, 2, 0, 0, 0, 0, 1},
	{2, 0, 0, 0, 0, 1, 1, 2},
	{0, 2, 0, 0, 1, 0, 2, 1},
	{0, 0, 1, 0, 1, 2, 0, 2},
	{0, 0, 0, 1, 2, 1, 2, 0},
}

func TestDGXV100LinksReadBackAsTheHybridCubeMesh(t *testing.T) {
	views := walk(t, open(t, "dgx-v100", "node-a"))
	gpuByBus := map[string]int{}
	for i, v := range views {
		gpuByBus[v.busID] = i
	}
	var got [8][8]int
	for i, v := range views {
		for _, l := range v.links {
			j, ok := gpuByBus[l.peer]
			if !ok {
				t.Fatalf("GPU %d links to unknown bus id %q", i, l.peer)
			}
			got[i][j]++
		}
	}
	if got != dgxV100Links {
		t.Errorf("link matrix read back:\n%v\nwant:\n%v", got, dgxV100Links)
	}
}

func TestNVLinkStateAnswersLikeNVML(t *testing.T) {
	tests := []struct {
		name    string
		profile string
		link    int
		state   nvml.EnableState
		ret     nvml.Return
	}{
		{"a used link is enabled", "dgx-v100", 5, nvml.FEATURE_ENABLED, nvml.SUCCESS},
		{"a link past the GPU's links is invalid", "dgx-v100", 6, nvml.FEATURE_DISABLED, nvml.ERROR_INVALID_ARGUMENT},
		{"a link past NVLINK_MAX_LINKS is invalid", "dgx-h100", nvml.NVLINK_MAX_LINKS, nvml.FEATURE_DISABLED, nvml.ERROR_INVALID_ARGUMENT},
		{"a negative link is invalid", "dgx-h100", -1, nvml.FEATURE_DISABLED, nvml.ERROR_INVALID_ARGUMENT},
		{"the 18th H100 link is enabled", "dgx-h100", 17, nvml.FEATURE_ENABLED, nvml.SUCCESS},
		{"a PCIe-only GPU has no NVLink", "l40s-pcie", 0, nvml.FEATURE_DISABLED, nvml.ERROR_NOT_SUPPORTED},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := open(t, tc.profile, "n").DeviceGetHandleByIndex(0)
			state, ret := d.GetNvLinkState(tc.link)
			if state != tc.state || ret != tc.ret {
				t.Errorf("GetNvLinkState(%d) = %v, %v; want %v, %v", tc.link, state, ret, tc.state, tc.ret)
			}
		})
	}
}

func TestUnusedMatrixLinksAreDisabled(t *testing.T) {
	p, err := Parse([]byte(`
name: two
model: A100_SXM4_80GB
count: 2
driver: {version: 550.90.07, cudaVersion: "12.4"}
pcie: {roots: [{name: pci0000:10, numaNode: 0, gpus: [0, 1]}]}
nvlink:
  linksPerGPU: 12
  matrix: ["X 4", "4 X"]
`), "two.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv, _, err := p.NewServer("n")
	if err != nil {
		t.Fatal(err)
	}
	d, _ := srv.DeviceGetHandleByIndex(1)
	for l, want := range map[int]nvml.EnableState{0: nvml.FEATURE_ENABLED, 3: nvml.FEATURE_ENABLED, 4: nvml.FEATURE_DISABLED, 11: nvml.FEATURE_DISABLED} {
		if state, ret := d.GetNvLinkState(l); state != want || ret != nvml.SUCCESS {
			t.Errorf("link %d: %v, %v; want %v", l, state, ret, want)
		}
	}
}

func TestNVSwitchLinksSpreadOverTheSwitches(t *testing.T) {
	tests := []struct {
		profile       string
		switches      int
		linksToSwitch []int
	}{
		{"dgx-a100", 6, []int{2, 2, 2, 2, 2, 2}},
		{"dgx-h100", 4, []int{5, 4, 5, 4}},
	}
	for _, tc := range tests {
		t.Run(tc.profile, func(t *testing.T) {
			views := walk(t, open(t, tc.profile, "n"))
			gpuBus := map[string]bool{}
			for _, v := range views {
				gpuBus[v.busID] = true
			}
			for i, v := range views {
				perSwitch := map[string]int{}
				for _, l := range v.links {
					if gpuBus[l.peer] {
						t.Fatalf("GPU %d: NVSwitch link reports GPU %s", i, l.peer)
					}
					perSwitch[l.peer]++
				}
				if len(perSwitch) != tc.switches {
					t.Fatalf("GPU %d reaches %d switches, want %d: %v", i, len(perSwitch), tc.switches, perSwitch)
				}
				var counts []int
				for _, bus := range slices.Sorted(maps.Keys(perSwitch)) {
					counts = append(counts, perSwitch[bus])
				}
				// Switch buses count down from 0xff, so sorted bus order is reverse switch order.
				for k := range counts {
					if counts[k] != tc.linksToSwitch[len(counts)-1-k] {
						t.Errorf("GPU %d links per switch (by bus) %v, want %v reversed", i, counts, tc.linksToSwitch)
						break
					}
				}
			}
		})
	}
}

func TestMIGPlacementsAndLifecycle(t *testing.T) {
	for _, profile := range []string{"dgx-a100", "dgx-h100"} {
		t.Run(profile, func(t *testing.T) {
			d, _ := open(t, profile, "n").DeviceGetHandleByIndex(0)
			info, ret := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
			if ret != nvml.SUCCESS {
				t.Fatalf("1g profile: %v", ret)
			}
			placements, _ := d.GetGpuInstancePossiblePlacements(&info)
			if len(placements) != 7 {
				t.Fatalf("1g placements = %v, want 7", placements)
			}
			if _, ret := d.CreateGpuInstanceWithPlacement(&info, &placements[0]); ret != nvml.ERROR_NOT_SUPPORTED {
				t.Errorf("create with MIG disabled = %v, want ERROR_NOT_SUPPORTED", ret)
			}
			if _, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
				t.Fatalf("SetMigMode: %v", ret)
			}
			if cur, pending, _ := d.GetMigMode(); cur != nvml.DEVICE_MIG_ENABLE || pending != nvml.DEVICE_MIG_ENABLE {
				t.Fatalf("MIG mode %d/%d after enabling", cur, pending)
			}
			gi, ret := d.CreateGpuInstanceWithPlacement(&info, &placements[0])
			if ret != nvml.SUCCESS {
				t.Fatalf("create 1g at %v: %v", placements[0], ret)
			}
			if _, ret := d.CreateGpuInstanceWithPlacement(&info, &placements[0]); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
				t.Errorf("overlapping create = %v, want ERROR_INSUFFICIENT_RESOURCES", ret)
			}
			bogus := nvml.GpuInstancePlacement{Start: 5, Size: 3}
			if _, ret := d.CreateGpuInstanceWithPlacement(&info, &bogus); ret != nvml.ERROR_INVALID_ARGUMENT {
				t.Errorf("create at unoffered placement = %v, want ERROR_INVALID_ARGUMENT", ret)
			}
			ciInfo, ret := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
			if ret != nvml.SUCCESS {
				t.Fatalf("CI profile: %v", ret)
			}
			ci, ret := gi.CreateComputeInstance(&ciInfo)
			if ret != nvml.SUCCESS {
				t.Fatalf("create CI: %v", ret)
			}
			if gis, _ := d.GetGpuInstances(&info); len(gis) != 1 {
				t.Errorf("%d GPU instances, want 1", len(gis))
			}
			if ci.Destroy() != nvml.SUCCESS || gi.Destroy() != nvml.SUCCESS {
				t.Fatal("destroy failed")
			}
			if gis, _ := d.GetGpuInstances(&info); len(gis) != 0 {
				t.Errorf("%d GPU instances after destroy, want 0", len(gis))
			}
			if _, ret := d.CreateGpuInstanceWithPlacement(&info, &placements[0]); ret != nvml.SUCCESS {
				t.Errorf("re-create after destroy: %v", ret)
			}
		})
	}
}

func TestGPUsWithoutMIGRefuseMIGCalls(t *testing.T) {
	d, _ := open(t, "dgx-v100", "n").DeviceGetHandleByIndex(0)
	if _, _, ret := d.GetMigMode(); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("GetMigMode = %v, want ERROR_NOT_SUPPORTED", ret)
	}
	if _, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("SetMigMode = %v, want ERROR_NOT_SUPPORTED", ret)
	}
	for id := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		if _, ret := d.GetGpuInstanceProfileInfo(id); ret != nvml.ERROR_NOT_SUPPORTED {
			t.Errorf("GetGpuInstanceProfileInfo(%d) = %v, want ERROR_NOT_SUPPORTED", id, ret)
		}
	}
	if _, ret := d.GetGpuInstancePossiblePlacements(&nvml.GpuInstanceProfileInfo{}); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("GetGpuInstancePossiblePlacements = %v, want ERROR_NOT_SUPPORTED", ret)
	}
}

func TestTopologyCommonAncestorFollowsThePCIeLayout(t *testing.T) {
	tests := []struct {
		name    string
		profile string
		a, b    int
		want    nvml.GpuTopologyLevel
	}{
		{"same GPU", "dgx-v100", 3, 3, nvml.TOPOLOGY_INTERNAL},
		{"same PCIe switch", "dgx-v100", 0, 1, nvml.TOPOLOGY_SINGLE},
		{"same root, other switch", "dgx-v100", 1, 2, nvml.TOPOLOGY_HOSTBRIDGE},
		{"other NUMA node", "dgx-v100", 3, 4, nvml.TOPOLOGY_SYSTEM},
		{"same root, no switch", "l40s-pcie", 0, 3, nvml.TOPOLOGY_HOSTBRIDGE},
		{"same NUMA node, other root", "dgx-a100", 1, 2, nvml.TOPOLOGY_NODE},
		{"same NUMA node, other root (H100)", "dgx-h100", 0, 3, nvml.TOPOLOGY_NODE},
		{"across sockets", "dgx-h100", 0, 7, nvml.TOPOLOGY_SYSTEM},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := open(t, tc.profile, "n")
			a, _ := srv.DeviceGetHandleByIndex(tc.a)
			b, _ := srv.DeviceGetHandleByIndex(tc.b)
			got, ret := a.GetTopologyCommonAncestor(b)
			if got != tc.want || ret != nvml.SUCCESS {
				t.Errorf("GPU %d vs %d: %v, %v; want %v", tc.a, tc.b, got, ret, tc.want)
			}
			if back, _ := b.GetTopologyCommonAncestor(a); back != got {
				t.Errorf("not symmetric: %v vs %v", got, back)
			}
		})
	}
}

func TestIdentitiesAreStablePerSeedAndDistinctAcrossSeeds(t *testing.T) {
	for _, profile := range BuiltinNames() {
		t.Run(profile, func(t *testing.T) {
			first, again, other := walk(t, open(t, profile, "node-a")), walk(t, open(t, profile, "node-a")), walk(t, open(t, profile, "node-b"))
			seen := map[string]bool{}
			for i := range first {
				if first[i].uuid != again[i].uuid || first[i].busID != again[i].busID {
					t.Errorf("GPU %d: identity changed across restarts: %s %s vs %s %s", i, first[i].uuid, first[i].busID, again[i].uuid, again[i].busID)
				}
				if first[i].busID != other[i].busID {
					t.Errorf("GPU %d: bus id depends on the seed", i)
				}
				for _, u := range []string{first[i].uuid, other[i].uuid} {
					if seen[u] {
						t.Errorf("UUID %s appears twice across GPUs and seeds", u)
					}
					seen[u] = true
				}
			}
		})
	}
}

func TestHandleLookupsFindTheSameGPU(t *testing.T) {
	srv := open(t, "dgx-h100", "n")
	views := walk(t, srv)
	for i, v := range views {
		byUUID, ret := srv.DeviceGetHandleByUUID(v.uuid)
		if ret != nvml.SUCCESS {
			t.Fatalf("DeviceGetHandleByUUID(%s): %v", v.uuid, ret)
		}
		if idx, _ := byUUID.GetIndex(); idx != i {
			t.Errorf("UUID %s finds GPU %d, want %d", v.uuid, idx, i)
		}
		for _, busID := range []string{v.busID, strings.ToLower(v.busIDLegacy)} {
			byBus, ret := srv.DeviceGetHandleByPciBusId(busID)
			if idx, _ := byBus.GetIndex(); ret != nvml.SUCCESS || idx != i {
				t.Errorf("bus id %s finds GPU %d (%v), want %d", busID, idx, ret, i)
			}
		}
	}
	if _, ret := srv.DeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000"); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("unknown UUID: %v, want ERROR_NOT_FOUND", ret)
	}
}

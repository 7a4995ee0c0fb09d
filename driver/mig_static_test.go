package driver_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/discover"
	"github.com/gpudra/gpudra/driver/nvmlsim"
	"github.com/gpudra/gpudra/driver/simulated"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// partitioned opens a simulated node, partitions its GPUs as layout says (GPU index →
// profiles, nvmlsim.PartitionMIG; an empty list only enables MIG mode) and discovers it.
func partitioned(t testing.TB, profile, nodeName string, layout map[int][]string) (*discover.Backend, *driver.Inventory) {
	t.Helper()
	b, err := simulated.Open(profile, nodeName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	for gpu, profiles := range layout {
		if err := nvmlsim.PartitionMIG(b.NVML, gpu, profiles...); err != nil {
			t.Fatal(err)
		}
	}
	inv, err := discover.Discover(b)
	if err != nil {
		t.Fatal(err)
	}
	return b, inv
}

func repeat(profile string, n int) []string {
	out := make([]string, n)
	for k := range out {
		out[k] = profile
	}
	return out
}

// migDevice is what a test expects of a published MIG device.
type migDevice struct {
	Name, Profile, UUID string
	Parent, Start, Size int
}

// publishedMIG lists the published MIG devices, in order.
func publishedMIG(rs []*resourceapi.ResourceSlice) []migDevice {
	var out []migDevice
	for _, s := range rs {
		for _, d := range s.Spec.Devices {
			if driver.DeviceType(d) != api.TypeMIG {
				continue
			}
			a := d.Attributes
			m := migDevice{Name: d.Name, Profile: *a[api.AttrMIGProfile].StringValue,
				Parent: int(*a[api.AttrParentIndex].IntValue), Start: int(*a[api.AttrMIGPlacementStart].IntValue), Size: int(*a[api.AttrMIGPlacementSize].IntValue)}
			if u, ok := a[api.AttrUUID]; ok {
				m.UUID = *u.StringValue
			}
			out = append(out, m)
		}
	}
	return out
}

// nvmlMIGDevices lists the MIG devices NVML reports on the simulated GPUs through their
// MIG device handles, with each one's GPU instance placement: what static MIG must publish.
func nvmlMIGDevices(t *testing.T, b *discover.Backend) []migDevice {
	t.Helper()
	var out []migDevice
	count, _ := b.NVML.DeviceGetCount()
	for i := range count {
		dev, _ := b.NVML.DeviceGetHandleByIndex(i)
		placements := map[int]nvml.GpuInstancePlacement{}
		profiles := map[int]int{}
		for id := range nvml.GPU_INSTANCE_PROFILE_COUNT {
			info, ret := dev.GetGpuInstanceProfileInfo(id)
			if ret != nvml.SUCCESS {
				continue
			}
			gis, _ := dev.GetGpuInstances(&info)
			for _, gi := range gis {
				d, _ := gi.GetInfo()
				placements[int(d.Id)], profiles[int(d.Id)] = d.Placement, id
			}
		}
		max, ret := dev.GetMaxMigDeviceCount()
		if ret != nvml.SUCCESS {
			continue
		}
		for k := range max {
			md, ret := dev.GetMigDeviceHandleByIndex(k)
			if ret != nvml.SUCCESS {
				continue
			}
			gi, _ := md.GetGpuInstanceId()
			uuid, _ := md.GetUUID()
			p := placements[gi]
			out = append(out, migDevice{UUID: uuid, Parent: i, Start: int(p.Start), Size: int(p.Size)})
		}
	}
	return out
}

func TestStaticMIGPublishesTheExistingInstances(t *testing.T) {
	type want struct {
		gpu     int
		profile string
		start   int
	}
	for _, tc := range []struct {
		node   string
		layout map[int][]string
		want   []want
	}{
		{"dgx-h100", map[int][]string{
			0: repeat("1g.10gb", 7),
			1: {"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"},
			2: nil, // MIG mode on, no instances
			3: {"7g.80gb"},
		}, []want{
			{0, "1g.10gb", 0}, {0, "1g.10gb", 1}, {0, "1g.10gb", 2}, {0, "1g.10gb", 3}, {0, "1g.10gb", 4}, {0, "1g.10gb", 5}, {0, "1g.10gb", 6},
			{1, "1g.10gb", 0}, {1, "1g.10gb", 1}, {1, "2g.20gb", 2}, {1, "3g.40gb", 4},
			{3, "7g.80gb", 0},
		}},
		{"dgx-a100", map[int][]string{
			0: repeat("1g.5gb", 7),
			1: {"4g.20gb", "2g.10gb", "1g.5gb"},
			2: {"3g.20gb", "3g.20gb"},
			5: nil,
		}, []want{
			{0, "1g.5gb", 0}, {0, "1g.5gb", 1}, {0, "1g.5gb", 2}, {0, "1g.5gb", 3}, {0, "1g.5gb", 4}, {0, "1g.5gb", 5}, {0, "1g.5gb", 6},
			{1, "1g.5gb", 6}, {1, "2g.10gb", 4}, {1, "4g.20gb", 0},
			{2, "3g.20gb", 0}, {2, "3g.20gb", 4},
		}},
	} {
		t.Run(tc.node, func(t *testing.T) {
			b, inv := partitioned(t, tc.node, "n", tc.layout)
			rs := render(t, inv, "n", driver.RenderOptions{MIG: driver.MIGStatic})
			checkLimits(t, rs)

			got := publishedMIG(rs)
			var names []string
			for _, w := range tc.want {
				names = append(names, driver.MIGDeviceName(w.gpu, w.profile, w.start))
			}
			var gotNames []string
			for _, m := range got {
				gotNames = append(gotNames, m.Name)
			}
			slices.Sort(names)
			slices.Sort(gotNames)
			if !reflect.DeepEqual(gotNames, names) {
				t.Errorf("MIG devices %v, want exactly the existing instances %v", gotNames, names)
			}
			// Each is an existing instance: its UUID is NVML's MIG device's, at that placement.
			fromNVML := nvmlMIGDevices(t, b)
			byUUID := map[string]migDevice{}
			for _, m := range fromNVML {
				byUUID[m.UUID] = m
			}
			for _, m := range got {
				n, ok := byUUID[m.UUID]
				if !ok {
					t.Errorf("%s: uuid %q is no MIG device NVML reports", m.Name, m.UUID)
					continue
				}
				if n.Parent != m.Parent || n.Start != m.Start || n.Size != m.Size {
					t.Errorf("%s: at GPU %d placement %d+%d, NVML's MIG device %s is at GPU %d placement %d+%d", m.Name, m.Parent, m.Start, m.Size, m.UUID, n.Parent, n.Start, n.Size)
				}
				delete(byUUID, m.UUID)
			}
			if len(byUUID) > 0 {
				t.Errorf("MIG devices NVML reports and the node does not publish: %v", byUUID)
			}
			for _, m := range got {
				for _, w := range tc.want {
					if driver.MIGDeviceName(w.gpu, w.profile, w.start) == m.Name && m.Profile != w.profile {
						t.Errorf("%s: migProfile %q, want %q", m.Name, m.Profile, w.profile)
					}
				}
			}

			// A GPU in MIG mode publishes nothing but its instances; the others are whole.
			for _, s := range rs {
				for _, d := range s.Spec.Devices {
					typ := driver.DeviceType(d)
					if typ != api.TypeGPU && typ != api.TypeShare {
						continue
					}
					idx := int(*d.Attributes[api.AttrIndex].IntValue)
					if _, mig := tc.layout[idx]; mig {
						t.Errorf("%s published for GPU %d, whose MIG mode is on", d.Name, idx)
					}
				}
			}
			count := map[string]int{}
			for _, s := range rs {
				for _, d := range s.Spec.Devices {
					count[driver.DeviceType(d)]++
				}
			}
			if whole := len(inv.GPUs) - len(tc.layout); count[api.TypeGPU] != whole || count[api.TypeShare] != whole {
				t.Errorf("published %v, want %d whole GPUs and shares", count, whole)
			}

			// Rediscovered and rendered again, every instance keeps its name and UUID.
			inv2, err := discover.Discover(b)
			if err != nil {
				t.Fatal(err)
			}
			if again := publishedMIG(render(t, inv2, "n", driver.RenderOptions{MIG: driver.MIGStatic})); !reflect.DeepEqual(again, got) {
				t.Errorf("republished MIG devices %v, first %v", again, got)
			}
		})
	}
}

func TestStaticMIGNamesStayWhenInstancesComeAndGo(t *testing.T) {
	b, inv := partitioned(t, "dgx-h100", "n", map[int][]string{0: {"3g.40gb", "1g.10gb"}})
	before := publishedMIG(render(t, inv, "n", driver.RenderOptions{}))
	if len(before) != 2 {
		t.Fatalf("MIG devices %v, want 2", before)
	}
	// Another instance appears beside them, as after nvidia-smi mig -cgi 2g.20gb -C.
	if err := nvmlsim.PartitionMIG(b.NVML, 0, "2g.20gb"); err != nil {
		t.Fatal(err)
	}
	inv, err := discover.Discover(b)
	if err != nil {
		t.Fatal(err)
	}
	after := publishedMIG(render(t, inv, "n", driver.RenderOptions{}))
	if len(after) != 3 {
		t.Fatalf("MIG devices %v, want 3", after)
	}
	for _, m := range before {
		if !slices.Contains(after, m) {
			t.Errorf("%s (%s) changed or went when another instance appeared: %v", m.Name, m.UUID, after)
		}
	}
}

func TestStaticMIGAllocatesAnExistingInstance(t *testing.T) {
	_, inv := partitioned(t, "dgx-h100", "h100", map[int][]string{
		0: {"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"},
		1: nil,
	})
	st := newState(t, render(t, inv, "h100", driver.RenderOptions{}))
	if got := mustAllocate(t, st, "h100", migOn(0, "2g.20gb")); !reflect.DeepEqual(got, []string{"gpu-0-mig-2g20gb-2"}) {
		t.Errorf("2g.20gb claim got %v, want the existing instance gpu-0-mig-2g20gb-2", got)
	}
	ones := []string{}
	for range 2 {
		ones = append(ones, mustAllocate(t, st, "h100", migOn(0, "1g.10gb"))...)
	}
	slices.Sort(ones)
	if want := []string{"gpu-0-mig-1g10gb-0", "gpu-0-mig-1g10gb-1"}; !reflect.DeepEqual(ones, want) {
		t.Errorf("two 1g.10gb claims got %v, want the two existing instances %v", ones, want)
	}
	mustNotFit(t, st, "h100", "both 1g.10gb instances are taken", migOn(0, "1g.10gb"))
	mustNotFit(t, st, "h100", "GPU 0 has no 7g.80gb instance", migOn(0, "7g.80gb"))
	mustNotFit(t, st, "h100", "GPU 1 is in MIG mode without instances", migOn(1, "1g.10gb"))
	mustNotFit(t, st, "h100", "GPU 0 is in MIG mode", gpuByIndex(0))
	mustAllocate(t, st, "h100", gpuByIndex(2))
}

func TestInventoryRecordsMIGInstances(t *testing.T) {
	_, inv := partitioned(t, "dgx-h100", "n", map[int][]string{4: {"3g.40gb", "1g.10gb"}})
	g := inv.GPU(4)
	if g.MIG == nil || len(g.MIG.Instances) != 2 {
		t.Fatalf("GPU 4 MIG %+v, want 2 instances", g.MIG)
	}
	one, three := g.MIG.Instances[0], g.MIG.Instances[1]
	if one.Profile != "1g.10gb" || one.Placement != (driver.MIGPlacement{Start: 3, Size: 1}) || !one.Full ||
		three.Profile != "3g.40gb" || three.Placement.Start != 4 || !three.Full {
		t.Errorf("instances %+v", g.MIG.Instances)
	}
	var profile driver.MIGProfile
	for _, p := range g.MIG.Profiles {
		if p.Name == "3g.40gb" {
			profile = p
		}
	}
	if three.UUID != nvmlsim.MIGDeviceUUID(g.UUID, three.GIID, three.CIID) || three.MemoryBytes != profile.MemoryBytes || three.Multiprocessors != profile.Multiprocessors {
		t.Errorf("3g.40gb instance %+v", three)
	}
	raw, err := json.Marshal(inv)
	if err != nil {
		t.Fatal(err)
	}
	var back driver.Inventory
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.GPU(4).MIG.Instances, g.MIG.Instances) {
		t.Errorf("instances after a JSON round trip %+v, want %+v", back.GPU(4).MIG.Instances, g.MIG.Instances)
	}
	for _, other := range inv.GPUs {
		if other.Index != 4 && other.MIG != nil && len(other.MIG.Instances) > 0 {
			t.Errorf("GPU %d with MIG mode off has instances %+v", other.Index, other.MIG.Instances)
		}
	}
}

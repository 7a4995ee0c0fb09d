package driver_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/discover"
	"github.com/gpudra/gpudra/driver/simulated"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

func TestDiscoveryLeavesOutAGPUItCannotRead(t *testing.T) {
	// Simulated nodes are go-nvml mock servers: one GPU's calls are made to fail.
	cases := []struct {
		name    string
		profile string
		fail    func(s *server.Server, gpu *server.Device)
		call    string // the NVML call recorded for the GPU
		ret     string
		reason  string
	}{
		{"its handle cannot be got", "dgx-h100", func(s *server.Server, _ *server.Device) {
			get := s.DeviceGetHandleByIndexFunc
			s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
				if i == 3 {
					return nil, nvml.ERROR_GPU_IS_LOST
				}
				return get(i)
			}
		}, "DeviceGetHandleByIndex", "ERROR_GPU_IS_LOST", "GPU 3"},
		{"it is lost: its memory cannot be read", "dgx-h100", func(_ *server.Server, d *server.Device) {
			d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
		}, "GetMemoryInfo", "ERROR_GPU_IS_LOST", "GPU 3"},
		{"one of its NVLinks cannot be read", "dgx-v100", func(_ *server.Server, d *server.Device) {
			d.GetNvLinkStateFunc = func(int) (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
		}, "GetNvLinkState(0)", "ERROR_UNKNOWN", "GPU 3"},
		{"its bus id is malformed", "dgx-v100", func(_ *server.Server, d *server.Device) {
			d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{}, nvml.SUCCESS }
		}, "", "", "domain:bus:device.function"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := simulated.Open(tc.profile, "n")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			srv := b.NVML.(*server.Server)
			tc.fail(srv, srv.Devices[3].(*server.Device))
			inv, err := discover.Discover(b)
			if err != nil {
				t.Fatalf("one GPU that cannot be read failed the node's discovery: %v", err)
			}
			if len(inv.Unreadable) != 1 {
				t.Fatalf("unreadable GPUs %+v, want GPU 3", inv.Unreadable)
			}
			u := inv.Unreadable[0]
			if u.Index != 3 || u.Call != tc.call || u.Return != tc.ret || !strings.Contains(u.Reason, tc.reason) {
				t.Errorf("unreadable GPU %+v, want index 3, call %q, return %q and a reason naming %q", u, tc.call, tc.ret, tc.reason)
			}
			var indices []int
			for _, g := range inv.GPUs {
				indices = append(indices, g.Index)
			}
			if want := []int{0, 1, 2, 4, 5, 6, 7}; !slices.Equal(indices, want) {
				t.Errorf("discovered GPUs %v, want %v", indices, want)
			}
			if len(inv.PCIe) != 7 || inv.NVLink.Validate() != nil {
				t.Errorf("topology is not the 7 readable GPUs': %d PCIe rows, NVLink %v", len(inv.PCIe), inv.NVLink.Validate())
			}
			rs := render(t, inv, "n", driver.RenderOptions{MIG: driver.MIGDynamic})
			checkLimits(t, rs)
			used := map[int]bool{}
			groups := 0
			for _, s := range rs {
				for _, d := range s.Spec.Devices {
					if usesGPU(d, 3) {
						t.Errorf("%s uses GPU 3, which discovery could not read", d.Name)
					}
					for _, g := range indices {
						used[g] = used[g] || usesGPU(d, g)
					}
					if driver.DeviceType(d) == api.TypeNVLinkGroup {
						groups++
					}
				}
			}
			for _, g := range indices {
				if !used[g] {
					t.Errorf("GPU %d is readable but none of its devices is published", g)
				}
			}
			if groups == 0 {
				t.Error("no NVLink group of the readable GPUs is published")
			}
		})
	}
}

func TestDiscoveryOfANodeWhoseGPUsAreAllLost(t *testing.T) {
	b, err := simulated.Open("l40s-pcie", "n")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	srv := b.NVML.(*server.Server)
	for _, d := range srv.Devices {
		d.(*server.Device).GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
	}
	inv, err := discover.Discover(b)
	if err != nil {
		t.Fatalf("lost GPUs failed the node's discovery: %v", err)
	}
	if len(inv.GPUs) != 0 || len(inv.Unreadable) != len(srv.Devices) {
		t.Fatalf("%d GPUs discovered, %d unreadable; want none and %d", len(inv.GPUs), len(inv.Unreadable), len(srv.Devices))
	}
	pool, err := driver.Render(inv, driver.RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range pool.Slices {
		if len(s.Devices) > 0 {
			t.Errorf("devices published for a node whose GPUs are all lost: %v", s.Devices)
		}
	}
}

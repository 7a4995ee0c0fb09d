package driver_test

import (
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/discover"
	"github.com/gpudra/gpudra/driver/nvmlsim"
	"github.com/gpudra/gpudra/driver/simulated"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// checkLimits enforces the resource.k8s.io/v1 limits a slice must stay within.
func checkLimits(t *testing.T, rs []*resourceapi.ResourceSlice) {
	t.Helper()
	names := map[string]bool{}
	sets := map[string]map[string]bool{}
	for _, s := range rs {
		for _, cs := range s.Spec.SharedCounters {
			sets[cs.Name] = map[string]bool{}
			for c := range cs.Counters {
				sets[cs.Name][c] = true
			}
		}
	}
	// Counters keep devices that use one GPU apart; a pool of whole GPUs alone needs none.
	onlyWhole := true
	for _, s := range rs {
		for _, d := range s.Spec.Devices {
			onlyWhole = onlyWhole && driver.DeviceType(d) == api.TypeGPU
		}
	}
	for _, s := range rs {
		if got, want := s.Spec.Pool.ResourceSliceCount, int64(len(rs)); got != want {
			t.Errorf("%s: resourceSliceCount %d, want %d", s.Name, got, want)
		}
		if len(s.Spec.SharedCounters) > 0 && len(s.Spec.Devices) > 0 {
			t.Errorf("%s: shared counters must sit in a slice without devices", s.Name)
		}
		if n := len(s.Spec.SharedCounters); n > resourceapi.ResourceSliceMaxCounterSets {
			t.Errorf("%s: %d counter sets, limit %d", s.Name, n, resourceapi.ResourceSliceMaxCounterSets)
		}
		for _, cs := range s.Spec.SharedCounters {
			if n := len(cs.Counters); n > resourceapi.ResourceSliceMaxCountersPerCounterSet {
				t.Errorf("%s: counter set %s has %d counters, limit %d", s.Name, cs.Name, n, resourceapi.ResourceSliceMaxCountersPerCounterSet)
			}
			for c := range cs.Counters {
				if errs := validation.IsDNS1123Label(c); len(errs) > 0 {
					t.Errorf("counter %q: %v", c, errs)
				}
			}
		}
		advanced := false
		for _, d := range s.Spec.Devices {
			advanced = advanced || len(d.ConsumesCounters) > 0 || len(d.Taints) > 0
		}
		limit := resourceapi.ResourceSliceMaxDevices
		if advanced {
			limit = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
		}
		if n := len(s.Spec.Devices); n > limit {
			t.Errorf("%s: %d devices, limit %d", s.Name, n, limit)
		}
		for _, d := range s.Spec.Devices {
			if names[d.Name] {
				t.Errorf("device %s published twice", d.Name)
			}
			names[d.Name] = true
			if errs := validation.IsDNS1123Label(d.Name); len(errs) > 0 {
				t.Errorf("device name %q: %v", d.Name, errs)
			}
			if n := len(d.Attributes) + len(d.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
				t.Errorf("%s: %d attributes+capacities, limit %d", d.Name, n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
			}
			for name, a := range d.Attributes {
				if a.StringValue != nil && len(*a.StringValue) > resourceapi.DeviceAttributeMaxValueLength {
					t.Errorf("%s: attribute %s is %d characters, limit %d", d.Name, name, len(*a.StringValue), resourceapi.DeviceAttributeMaxValueLength)
				}
			}
			if n := len(d.ConsumesCounters); n > resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice {
				t.Errorf("%s: consumes from %d counter sets, limit %d", d.Name, n, resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice)
			}
			if len(d.ConsumesCounters) == 0 && !onlyWhole {
				t.Errorf("%s consumes no counters: nothing would stop it sharing a GPU with another device", d.Name)
			}
			for _, cc := range d.ConsumesCounters {
				if n := len(cc.Counters); n > resourceapi.ResourceSliceMaxCountersPerDeviceCounterConsumption {
					t.Errorf("%s: %d counters from %s, limit %d", d.Name, n, cc.CounterSet, resourceapi.ResourceSliceMaxCountersPerDeviceCounterConsumption)
				}
				for c := range cc.Counters {
					if !sets[cc.CounterSet][c] {
						t.Errorf("%s consumes %s/%s, which no slice defines", d.Name, cc.CounterSet, c)
					}
				}
			}
		}
	}
}

func TestSlicesStayWithinAPILimits(t *testing.T) {
	for _, profile := range nvmlsim.BuiltinNames() {
		t.Run(profile, func(t *testing.T) {
			_, rs := simNode(t, profile, "node-1")
			checkLimits(t, rs)
		})
	}
	t.Run("16 MIG-capable GPUs on NVSwitch", func(t *testing.T) {
		inv, _ := simNode(t, "dgx-h100", "big")
		big := *inv
		big.GPUs = nil
		for k := range 16 {
			g := inv.GPUs[k%8]
			g.Index, g.Minor, g.UUID = k, k, fmt.Sprintf("GPU-%d", k)
			big.GPUs = append(big.GPUs, g)
		}
		big.NVLink = inv.NVLink
		big.NVLink.Links = make([][]int, 16)
		big.NVLink.SwitchLinks = make([]int, 16)
		for k := range 16 {
			big.NVLink.Links[k] = make([]int, 16)
			big.NVLink.SwitchLinks[k] = 18
		}
		rs := render(t, &big, "big", driver.RenderOptions{MIG: driver.MIGDynamic})
		checkLimits(t, rs)
		st := newState(t, rs)
		if got := mustAllocate(t, st, "big", `
devices:
  requests:
  - name: gpus
    exactly:
      deviceClassName: gpu.gpudra.dev
      count: 16
  constraints:
  - matchAttribute: gpu.gpudra.dev/nvlinkClique
`); len(got) != 16 {
			t.Fatalf("got %v", got)
		}
	})
}

func TestDeviceKindsPerProfile(t *testing.T) {
	tests := []struct {
		profile                     string
		gpus, shares, groups, migOK int
	}{
		{"dgx-v100", 8, 8, 18, 0},
		{"l40s-pcie", 8, 8, 0, 0},
		{"dgx-h100", 8, 8, 7, 1},
		{"dgx-a100", 8, 8, 7, 1},
	}
	for _, tc := range tests {
		t.Run(tc.profile, func(t *testing.T) {
			_, rs := simNode(t, tc.profile, "n")
			count := map[string]int{}
			for _, s := range rs {
				for _, d := range s.Spec.Devices {
					count[*d.Attributes["type"].StringValue]++
				}
			}
			if count[api.TypeGPU] != tc.gpus || count[api.TypeShare] != tc.shares || count[api.TypeNVLinkGroup] != tc.groups {
				t.Errorf("published %v", count)
			}
			if (count[api.TypeMIG] > 0) != (tc.migOK == 1) {
				t.Errorf("MIG devices: %d", count[api.TypeMIG])
			}
		})
	}
}

func TestMIGStrategies(t *testing.T) {
	b, err := simulated.Open("dgx-h100", "n")
	if err != nil {
		t.Fatal(err)
	}
	inv, err := discover.Discover(b)
	if err != nil {
		t.Fatal(err)
	}
	count := func(opts driver.RenderOptions) map[string]int {
		pool, err := driver.Render(inv, opts)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, s := range pool.ResourceSlices("n", 1) {
			for _, d := range s.Spec.Devices {
				out[*d.Attributes["type"].StringValue]++
			}
		}
		return out
	}
	if c := count(driver.RenderOptions{}); c[api.TypeGPU] != 8 || c[api.TypeShare] != 8 || c[api.TypeMIG] != 0 || c[api.TypeNVLinkGroup] != 7 {
		t.Errorf("default with MIG mode off everywhere: %v (want 8 whole GPUs, 8 shares, 7 groups, no MIG)", c)
	}
	inv.GPUs[0].MIG.Enabled = true // an operator enabled MIG mode on GPU 0 only
	if c := count(driver.RenderOptions{MIG: driver.MIGStatic}); c[api.TypeGPU] != 7 || c[api.TypeMIG] != 0 || c[api.TypeNVLinkGroup] != 4 {
		t.Errorf("static: %v (want 7 whole GPUs, no MIG devices on unpartitioned GPU 0, groups without GPU 0)", c)
	}
	if err := nvmlsim.PartitionMIG(b.NVML, 0, "3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"); err != nil {
		t.Fatal(err)
	}
	if inv, err = discover.Discover(b); err != nil {
		t.Fatal(err)
	}
	if c := count(driver.RenderOptions{MIG: driver.MIGStatic}); c[api.TypeGPU] != 7 || c[api.TypeMIG] != 4 || c[api.TypeNVLinkGroup] != 4 {
		t.Errorf("static: %v (want 7 whole GPUs, GPU 0's 4 MIG instances, groups without GPU 0)", c)
	}
	if c := count(driver.RenderOptions{MIG: driver.MIGNone}); c[api.TypeMIG] != 0 || c[api.TypeGPU] != 8 {
		t.Errorf("none: %v", c)
	}
	if _, err := driver.Render(inv, driver.RenderOptions{MIG: "sometimes"}); err == nil {
		t.Error("unknown MIG strategy accepted")
	}
}

package driver_test

import (
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/nvmlsim"
)

// Every device that is not a share says, in its compute capacity, the percent of a GPU it
// takes: what a queue's quota is charged for it. A whole GPU is 100, an NVLink group 100
// per GPU, and a MIG device never less than its fraction of the GPU's multiprocessors or
// memory, so that a queue never holds more of a GPU than it pays for. A GPU filled with one
// profile never costs more than a whole GPU.
func TestComputeCapacityIsTheShareOfAGPUADeviceTakes(t *testing.T) {
	for _, profile := range nvmlsim.BuiltinNames() {
		t.Run(profile, func(t *testing.T) {
			inv, slices := simNode(t, profile, "n")
			byIndex := map[int]*driver.GPU{}
			for k := range inv.GPUs {
				byIndex[inv.GPUs[k].Index] = &inv.GPUs[k]
			}
			perGPU := map[string]int64{} // GPU index and MIG profile → devices
			charge := map[string]int64{}
			for _, s := range slices {
				for _, d := range s.Spec.Devices {
					typ := *d.Attributes[api.AttrType].StringValue
					got, ok := d.Capacity[api.CapCompute]
					if !ok {
						t.Errorf("device %s (%s) has no %s capacity", d.Name, typ, api.CapCompute)
						continue
					}
					pct := got.Value.Value()
					switch typ {
					case api.TypeGPU:
						if pct != 100 {
							t.Errorf("whole GPU %s: compute %d, want 100", d.Name, pct)
						}
					case api.TypeShare:
						if pct != 100 || got.RequestPolicy == nil {
							t.Errorf("share %s: compute %v, want 100 with a request policy", d.Name, got)
						}
					case api.TypeNVLinkGroup:
						if n := *d.Attributes[api.AttrGPUCount].IntValue; pct != 100*n {
							t.Errorf("NVLink group %s of %d GPUs: compute %d, want %d", d.Name, n, pct, 100*n)
						}
					case api.TypeMIG:
						checkMIGCharge(t, d, byIndex, pct)
						key := fmt.Sprintf("%d/%s", *d.Attributes[api.AttrParentIndex].IntValue, *d.Attributes[api.AttrMIGProfile].StringValue)
						perGPU[key]++
						charge[key] = pct
					}
				}
			}
			for key, n := range perGPU {
				limit := migInstanceLimit(t, inv, key)
				if total := min(n, limit) * charge[key]; total > 100 {
					t.Errorf("%s: %d instances at %d%% cost %d%%, more than the whole GPU", key, min(n, limit), charge[key], total)
				}
			}
		})
	}
}

func checkMIGCharge(t *testing.T, d resourceapi.Device, byIndex map[int]*driver.GPU, pct int64) {
	t.Helper()
	g := byIndex[int(*d.Attributes[api.AttrParentIndex].IntValue)]
	smsQ, memQ := d.Capacity[api.CapMultiprocessors].Value, d.Capacity[api.CapMemory].Value
	sms, mem := smsQ.Value(), memQ.Value()
	if pct < 1 || pct > 100 {
		t.Errorf("MIG device %s: compute %d, want 1..100", d.Name, pct)
	}
	if pct*int64(g.Multiprocessors) < 100*sms {
		t.Errorf("MIG device %s: compute %d%% is less than its %d of %d multiprocessors", d.Name, pct, sms, g.Multiprocessors)
	}
	if pct*int64(g.MemoryBytes>>20) < 100*(mem>>20) {
		t.Errorf("MIG device %s: compute %d%% is less than its %d of %d MiB", d.Name, pct, mem>>20, g.MemoryBytes>>20)
	}
}

// migInstanceLimit is how many instances of the key's profile fit on its GPU at once.
func migInstanceLimit(t *testing.T, inv *driver.Inventory, key string) int64 {
	t.Helper()
	var gpu int
	var profile string
	if _, err := fmt.Sscanf(key, "%d/%s", &gpu, &profile); err != nil {
		t.Fatal(err)
	}
	for _, g := range inv.GPUs {
		if g.Index != gpu {
			continue
		}
		for _, p := range g.MIG.Profiles {
			if p.Name == profile {
				return int64(p.InstanceLimit())
			}
		}
	}
	t.Fatalf("no MIG profile %s on GPU %d", profile, gpu)
	return 0
}

func TestMIGComputePercentRoundsUpAndStaysInRange(t *testing.T) {
	for _, tc := range []struct {
		sms, gpuSMs int
		mem, gpuMem uint64
		want        int64
	}{
		{16, 132, 9856 << 20, 81559 << 20, 13},  // H100 1g.10gb: 12.1 % of the SMs, 12.1 % of memory
		{16, 132, 19968 << 20, 81559 << 20, 25}, // H100 1g.20gb: memory decides
		{132, 132, 80896 << 20, 81559 << 20, 100},
		{14, 56, 5952 << 20, 24576 << 20, 25}, // A30 1g.6gb
		{0, 0, 0, 0, 100},                     // unknown GPU: the whole of it
		{1, 1000, 1 << 20, 1 << 40, 1},        // at least 1
	} {
		if got := driver.MIGComputePercent(tc.sms, tc.gpuSMs, tc.mem, tc.gpuMem); got != tc.want {
			t.Errorf("MIGComputePercent(%d, %d, %d, %d) = %d, want %d", tc.sms, tc.gpuSMs, tc.mem, tc.gpuMem, got, tc.want)
		}
	}
}

package driver_test

import (
	"fmt"
	"reflect"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpudra/gpudra/driver"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// devicesByName are the devices of the slices, by name.
func devicesByName(rs []*resourceapi.ResourceSlice) map[string]resourceapi.Device {
	out := map[string]resourceapi.Device{}
	for _, s := range rs {
		for _, d := range s.Spec.Devices {
			out[d.Name] = d
		}
	}
	return out
}

// oversubscriptionAttrs are a device's memoryOversubscribed and memoryOversubscriptionPercent.
func oversubscriptionAttrs(t *testing.T, d resourceapi.Device) (bool, int64) {
	t.Helper()
	b, i := d.Attributes[api.AttrMemoryOversubscribed], d.Attributes[api.AttrMemoryOversubscriptionPercent]
	if b.BoolValue == nil || i.IntValue == nil {
		t.Fatalf("%s: attributes %s %+v, %s %+v: want a bool and an int", d.Name, api.AttrMemoryOversubscribed, b, api.AttrMemoryOversubscriptionPercent, i)
	}
	return *b.BoolValue, *i.IntValue
}

func TestMemoryOversubscriptionMultipliesOnlyTheShareCapacity(t *testing.T) {
	inv := simInventory(t, "dgx-h100", "h100")
	cardMiB := int64(inv.GPUs[0].MemoryBytes >> 20)
	// Dynamic MIG publishes whole GPUs, shares, NVLink groups and MIG devices at once.
	plain := render(t, inv, "h100", driver.RenderOptions{MIG: driver.MIGDynamic})
	checkLimits(t, plain)
	base := devicesByName(plain)
	tests := []struct {
		factor      float64
		wantMiB     int64 // each share's memory capacity
		wantOver    bool
		wantPercent int64
	}{
		{0, cardMiB, false, 100},
		{1, cardMiB, false, 100},
		{1.5, cardMiB * 3 / 2, true, 150},
		{1.1, cardMiB * 11 / 10, true, 110},
		{4, cardMiB * 4, true, 400},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("factor %v", tc.factor), func(t *testing.T) {
			rs := render(t, inv, "h100", driver.RenderOptions{MIG: driver.MIGDynamic, MemoryOversubscription: tc.factor})
			checkLimits(t, rs)
			got := devicesByName(rs)
			if len(got) != len(base) {
				t.Fatalf("%d devices, want %d as without oversubscription", len(got), len(base))
			}
			shares := 0
			for name, d := range got {
				if driver.DeviceType(d) != api.TypeShare {
					if !equality.Semantic.DeepEqual(d, base[name]) {
						t.Errorf("%s (type %s) changed with memory oversubscription %v", name, driver.DeviceType(d), tc.factor)
					}
					if _, ok := d.Attributes[api.AttrMemoryOversubscribed]; ok {
						t.Errorf("%s (type %s) carries %s", name, driver.DeviceType(d), api.AttrMemoryOversubscribed)
					}
					continue
				}
				shares++
				mem := d.Capacity[api.CapMemory]
				if want := resource.MustParse(fmt.Sprintf("%dMi", tc.wantMiB)); mem.Value.Cmp(want) != 0 {
					t.Errorf("%s: memory capacity %s, want %s (%v × %d Mi)", name, mem.Value.String(), want.String(), tc.factor, cardMiB)
				}
				// One share still asks for at most the card's memory.
				if max := mem.RequestPolicy.ValidRange.Max; max.Cmp(resource.MustParse(fmt.Sprintf("%dMi", cardMiB))) != 0 {
					t.Errorf("%s: largest request %s, want the card's %d Mi", name, max.String(), cardMiB)
				}
				if !equality.Semantic.DeepEqual(d.Capacity[api.CapCompute], base[name].Capacity[api.CapCompute]) {
					t.Errorf("%s: compute capacity changed", name)
				}
				if over, percent := oversubscriptionAttrs(t, d); over != tc.wantOver || percent != tc.wantPercent {
					t.Errorf("%s: %s %v, %s %d; want %v, %d", name, api.AttrMemoryOversubscribed, over, api.AttrMemoryOversubscriptionPercent, percent, tc.wantOver, tc.wantPercent)
				}
			}
			if shares != len(inv.GPUs) {
				t.Errorf("%d share devices, want one per GPU (%d)", shares, len(inv.GPUs))
			}
		})
	}
	t.Run("factor 1 publishes what the default does", func(t *testing.T) {
		one := render(t, inv, "h100", driver.RenderOptions{MIG: driver.MIGDynamic, MemoryOversubscription: 1})
		if !reflect.DeepEqual(one, plain) {
			t.Error("factor 1 and the zero value publish different slices")
		}
	})
}

func TestMemoryOversubscriptionOutOfRangeIsRefused(t *testing.T) {
	inv := simInventory(t, "dgx-h100", "h100")
	for _, f := range []float64{0.5, 4.01, -1} {
		if _, err := driver.Render(inv, driver.RenderOptions{MemoryOversubscription: f}); err == nil {
			t.Errorf("memory oversubscription %v accepted", f)
		}
	}
}

func TestOversubscribedSharesFitUpToTheFactor(t *testing.T) {
	inv := simInventory(t, "dgx-h100", "h100")
	cardMiB := int64(inv.GPUs[0].MemoryBytes >> 20)
	half := fmt.Sprintf("%dMi", cardMiB/2)
	t.Run("factor 1.5: three half-card shares on one GPU", func(t *testing.T) {
		st := newState(t, render(t, inv, "h100", driver.RenderOptions{MemoryOversubscription: 1.5}))
		for k := range 3 {
			if got := mustAllocate(t, st, "h100", shareOn(0, half, "0")); !reflect.DeepEqual(got, []string{"gpu-0-share"}) {
				t.Fatalf("share %d: got %v", k+1, got)
			}
		}
		mustNotFit(t, st, "h100", "1.5 × the card's memory is taken", shareOn(0, "256Mi", "0"))
		mustAllocate(t, st, "h100", shareOn(1, half, "0"))
	})
	t.Run("factor 1.5: one share asks for at most the card's memory", func(t *testing.T) {
		st := newState(t, render(t, inv, "h100", driver.RenderOptions{MemoryOversubscription: 1.5}))
		mustNotFit(t, st, "h100", "more than the card in one share", shareOn(0, fmt.Sprintf("%dMi", cardMiB+1), "0"))
		mustAllocate(t, st, "h100", shareOn(0, fmt.Sprintf("%dMi", cardMiB), "0"))
		mustAllocate(t, st, "h100", shareOn(0, fmt.Sprintf("%dMi", cardMiB*3/2-cardMiB), "0"))
		mustNotFit(t, st, "h100", "1.5 × the card's memory is taken", shareOn(0, "256Mi", "0"))
	})
	t.Run("factor 1: two half-card shares, not three", func(t *testing.T) {
		st := newState(t, render(t, inv, "h100", driver.RenderOptions{}))
		mustAllocate(t, st, "h100", shareOn(0, half, "0"))
		mustAllocate(t, st, "h100", shareOn(0, half, "0"))
		mustNotFit(t, st, "h100", "the card's memory is taken", shareOn(0, half, "0"))
	})
	t.Run("the shares still exclude the whole GPU", func(t *testing.T) {
		st := newState(t, render(t, inv, "h100", driver.RenderOptions{MemoryOversubscription: 2}))
		mustAllocate(t, st, "h100", shareOn(2, half, "0"))
		mustNotFit(t, st, "h100", "GPU 2 has a share", gpuByIndex(2))
	})
}

func TestSelectorsOnMemoryOversubscription(t *testing.T) {
	over := render(t, simInventory(t, "dgx-h100", "over"), "over", driver.RenderOptions{MemoryOversubscription: 1.5})
	plain := render(t, simInventory(t, "dgx-h100", "plain"), "plain", driver.RenderOptions{})
	st := newState(t, over, plain)
	share := func(expr string) string {
		return fmt.Sprintf(`
devices:
  requests:
  - name: share
    exactly:
      deviceClassName: gpu-share.gpudra.dev
      selectors:
      - cel:
          expression: %s
      capacity:
        requests:
          memory: 4Gi
`, expr)
	}
	latencySensitive := share(`'!device.attributes["gpu.gpudra.dev"].memoryOversubscribed'`)
	mustNotFit(t, st, "over", "the node oversubscribes memory", latencySensitive)
	if got := mustAllocate(t, st, "plain", latencySensitive); len(got) != 1 || got[0] != "gpu-0-share" {
		t.Errorf("plain node: got %v", got)
	}
	atLeast := share(`'device.attributes["gpu.gpudra.dev"].memoryOversubscriptionPercent >= 150'`)
	mustAllocate(t, st, "over", atLeast)
	mustNotFit(t, st, "plain", "the node does not oversubscribe memory", atLeast)
}

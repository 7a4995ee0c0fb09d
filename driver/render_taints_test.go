package driver_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/driver"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// usesGPU says from its published attributes whether device d uses GPU gpu.
func usesGPU(d resourceapi.Device, gpu int) bool {
	a := d.Attributes
	switch *a[api.AttrType].StringValue {
	case api.TypeGPU, api.TypeShare:
		return *a[api.AttrIndex].IntValue == int64(gpu)
	case api.TypeMIG:
		return *a[api.AttrParentIndex].IntValue == int64(gpu)
	case api.TypeNVLinkGroup:
		return slices.Contains(strings.Split(*a[api.AttrMembers].StringValue, "-"), strconv.Itoa(gpu))
	}
	return false
}

func TestTaintsGoOnEveryDeviceUsingTheGPU(t *testing.T) {
	xid79 := resourceapi.DeviceTaint{Key: "gpu.gpudra.dev/unhealthy", Value: "xid-79", Effect: resourceapi.DeviceTaintEffectNoExecute}
	ecc := resourceapi.DeviceTaint{Key: "gpu.gpudra.dev/unhealthy", Value: "ecc-double-bit", Effect: resourceapi.DeviceTaintEffectNoExecute}
	inv := simInventory(t, "dgx-h100", "n")
	tests := []struct {
		name   string
		mig    driver.MIGStrategy
		taints map[int][]resourceapi.DeviceTaint
	}{
		{"one GPU, every kind of device published", driver.MIGDynamic, map[int][]resourceapi.DeviceTaint{2: {xid79}}},
		{"one GPU, MIG strategy none", driver.MIGNone, map[int][]resourceapi.DeviceTaint{2: {xid79}}},
		{"two GPUs with different taints", driver.MIGDynamic, map[int][]resourceapi.DeviceTaint{2: {xid79}, 3: {ecc}}},
		{"two GPUs with the same taint", driver.MIGDynamic, map[int][]resourceapi.DeviceTaint{2: {xid79}, 5: {xid79}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := render(t, inv, "n", driver.RenderOptions{MIG: tc.mig, Taints: tc.taints})
			checkLimits(t, rs)
			tainted := 0
			for _, s := range rs {
				for _, d := range s.Spec.Devices {
					var want []resourceapi.DeviceTaint
					for gpu := range 8 {
						for _, taint := range tc.taints[gpu] {
							if usesGPU(d, gpu) && !slices.Contains(want, taint) {
								want = append(want, taint)
							}
						}
					}
					if !sameTaints(d.Taints, want) {
						t.Errorf("%s: taints %v, want %v", d.Name, d.Taints, want)
					}
					if len(d.Taints) > 0 {
						tainted++
					}
				}
			}
			if tainted == 0 {
				t.Error("no device is tainted")
			}
		})
	}
}

func sameTaints(a, b []resourceapi.DeviceTaint) bool {
	if len(a) != len(b) {
		return false
	}
	for _, t := range a {
		if !slices.Contains(b, t) {
			return false
		}
	}
	return true
}

func TestNoTaintsPublishesNoTaints(t *testing.T) {
	_, rs := simNode(t, "dgx-h100", "n")
	for _, s := range rs {
		for _, d := range s.Spec.Devices {
			if len(d.Taints) > 0 {
				t.Errorf("%s: taints %v without any asked for", d.Name, d.Taints)
			}
		}
	}
}

package driver_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpudra/gpudra/driver"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// TestPublication: a training pool offers whole GPUs and NVLink groups, a whole pool only
// whole GPUs, without counters, so that its slices cost the scheduler what a plain
// driver's do; both still allocate whole GPUs.
func TestPublication(t *testing.T) {
	cases := []struct {
		publish      driver.Publication
		types        []string
		counters     bool
		fourGPUGroup bool
	}{
		{driver.PublishAll, []string{api.TypeGPU, api.TypeShare, api.TypeNVLinkGroup}, true, true},
		{driver.PublishTraining, []string{api.TypeGPU, api.TypeNVLinkGroup}, true, true},
		{driver.PublishWhole, []string{api.TypeGPU}, false, false},
	}
	for _, tc := range cases {
		t.Run(string(tc.publish), func(t *testing.T) {
			inv := simInventory(t, "dgx-h100", "node-0")
			opts, err := tc.publish.Options(driver.RenderOptions{})
			if err != nil {
				t.Fatal(err)
			}
			rs := render(t, inv, "node-0", opts)
			checkLimits(t, rs)
			var types []string
			counters := false
			for _, s := range rs {
				counters = counters || len(s.Spec.SharedCounters) > 0
				for _, d := range s.Spec.Devices {
					counters = counters || len(d.ConsumesCounters) > 0
					if typ := driver.DeviceType(d); !slices.Contains(types, typ) {
						types = append(types, typ)
					}
				}
			}
			if !slices.Equal(types, tc.types) {
				t.Errorf("device types %v, want %v", types, tc.types)
			}
			if counters != tc.counters {
				t.Errorf("counters published: %v, want %v", counters, tc.counters)
			}
			st := newState(t, rs)
			for g := range 4 {
				mustAllocate(t, st, "node-0", gpuByIndex(g))
			}
			// GPUs 4-7 are free: a 4-GPU NVLink group fits only where groups are published.
			if got := allocate(t, st, "node-0", fourGPUGroup) != nil; got != tc.fourGPUGroup {
				t.Errorf("4-GPU NVLink group allocated: %v, want %v", got, tc.fourGPUGroup)
			}
			mustNotFit(t, st, "node-0", "GPU 0 is allocated whole", gpuByIndex(0))
		})
	}
}

func TestPublicationRefuses(t *testing.T) {
	cases := []struct {
		name    string
		publish driver.Publication
		opts    driver.RenderOptions
		want    string
	}{
		{"unknown publication", "inference", driver.RenderOptions{}, `publication "inference": accepted values are all, training, whole`},
		{"dynamic MIG without MIG devices", driver.PublishTraining, driver.RenderOptions{MIG: driver.MIGDynamic}, "takes mig strategy static or none, not dynamic"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.publish.Options(tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

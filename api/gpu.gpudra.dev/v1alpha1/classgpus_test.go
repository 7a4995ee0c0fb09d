package v1alpha1_test

import (
	"testing"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// TestClassGPUs: every vendor's whole-GPU class holds one GPU, a sized group class its
// size, an open-sized group class its smallest group; shares, MIG and other drivers' classes
// hold no whole GPU.
func TestClassGPUs(t *testing.T) {
	for _, tc := range []struct {
		class string
		want  int
		ok    bool
	}{
		{api.DeviceClassGPU, 1, true},
		{api.DeviceClassAMDGPU, 1, true},
		{api.DeviceClassHygonGPU, 1, true},
		{api.DeviceClassAnyGPU, 1, true},
		{api.DeviceClassNVLinkGroupOf(4), 4, true},
		{api.DeviceClassGPUGroupOf(8), 8, true},
		{api.DeviceClassNVLinkGroup, 2, true},
		{api.DeviceClassXGMIGroup, 2, true},
		{api.DeviceClassGPUGroup, 2, true},
		{api.DeviceClassShare, 0, false},
		{api.DeviceClassMIG, 0, false},
		{"nvlink-group-0.gpudra.dev", 0, false},
		{"nvlink-group-x.gpudra.dev", 0, false},
		{"gpu.example.com", 0, false},
	} {
		got, ok := api.ClassGPUs(tc.class)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ClassGPUs(%q) = %d, %v; want %d, %v", tc.class, got, ok, tc.want, tc.ok)
		}
	}
}

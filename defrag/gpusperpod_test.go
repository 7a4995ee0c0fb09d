package defrag

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/queueing/gang"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// TestGPUsPerPodCountsEveryVendorsGPUs: the room a pending workload's pod needs on one node
// counts whole GPUs of every vendor's class and linked groups by their size.
func TestGPUsPerPodCountsEveryVendorsGPUs(t *testing.T) {
	request := func(class string, count int64) resourceapi.DeviceRequest {
		return resourceapi.DeviceRequest{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}}
	}
	for _, tc := range []struct {
		name string
		reqs []resourceapi.DeviceRequest
		want int
	}{
		{"four AMD GPUs", []resourceapi.DeviceRequest{request(api.DeviceClassAMDGPU, 4)}, 4},
		{"eight of any vendor", []resourceapi.DeviceRequest{request(api.DeviceClassAnyGPU, 8)}, 8},
		{"a cross-vendor group of 4", []resourceapi.DeviceRequest{request(api.DeviceClassGPUGroupOf(4), 1)}, 4},
		{"two NVLink pairs", []resourceapi.DeviceRequest{request(api.DeviceClassNVLinkGroupOf(2), 2)}, 4},
		{"a share", []resourceapi.DeviceRequest{request(api.DeviceClassShare, 1)}, 1},
	} {
		wl := &Workload{Name: "w", PodSets: []gang.PodSet{{Claims: []resourceapi.ResourceClaimSpec{{Devices: resourceapi.DeviceClaim{Requests: tc.reqs}}}}}}
		if got := gpusPerPod(wl); got != tc.want {
			t.Errorf("%s: %d GPUs a pod, want %d", tc.name, got, tc.want)
		}
	}
}

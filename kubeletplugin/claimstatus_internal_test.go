package kubeletplugin

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// A prepared device is Ready while its GPUs are healthy, and not Ready, with the
// unhealthy GPU named, once one of them carries the unhealthy taint.
func TestDeviceReadinessFollowsItsGPUsHealth(t *testing.T) {
	unhealthy := map[int][]resourceapi.DeviceTaint{3: {{Key: api.TaintUnhealthy, Value: "xid-79", Effect: resourceapi.DeviceTaintEffectNoExecute}}}
	for _, tc := range []struct {
		name   string
		gpus   []int
		taints map[int][]resourceapi.DeviceTaint
		want   readiness
	}{
		{"healthy GPU", []int{3}, nil, readiness{ready: true, reason: ReasonPrepared, message: "prepared on this node"}},
		{"other GPU unhealthy", []int{2}, unhealthy, readiness{ready: true, reason: ReasonPrepared, message: "prepared on this node"}},
		{"its GPU unhealthy", []int{3}, unhealthy, readiness{reason: ReasonGPUUnhealthy, message: "unhealthy: GPU 3 (xid-79)"}},
		{"one GPU of an NVLink group unhealthy", []int{2, 3}, unhealthy, readiness{reason: ReasonGPUUnhealthy, message: "unhealthy: GPU 3 (xid-79)"}},
	} {
		if got := deviceReadiness(prepared.Device{GPUs: tc.gpus}, tc.taints); got != tc.want {
			t.Errorf("%s: readiness %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

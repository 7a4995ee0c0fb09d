package admission

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/driver/allocation"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// wholeJob is a Workload with quota reserved and the gpudra check pending: pod set main of
// one pod whose claim template "whole" has the request spec (YAML) names, and the
// DeviceClasses extra.
func wholeJob(t *testing.T, spec string, extra ...client.Object) []client.Object {
	t.Helper()
	claim, err := allocation.ParseClaimSpec([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "whole"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: claim}}
	wl := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "cheap", UID: "cheap"},
		Spec: kueue.WorkloadSpec{PodSets: []kueue.PodSet{{Name: "main", Count: 1, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers:     []corev1.Container{{Name: "main", Image: "trainer"}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("whole")}},
		}}}}}}
	wl.Status.Conditions = []metav1.Condition{{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionTrue, Reason: "QuotaReserved", LastTransitionTime: metav1.Now()}}
	wl.Status.AdmissionChecks = []kueue.AdmissionCheckState{{Name: "gpudra-topology", State: kueue.CheckStatePending}}
	return append([]client.Object{tmpl, wl}, extra...)
}

// ownClass is a DeviceClass a cluster's administrator writes, selecting gpudra devices of
// one type.
func ownClass(name, deviceType string) *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: `device.driver == "gpu.gpudra.dev" && device.attributes["gpu.gpudra.dev"].type == "` + deviceType + `"`}}}}}
}

// TestWholeDeviceAskingForCapacity: the allocator gives a whole GPU, MIG device or NVLink
// group whole whatever capacity a request asks, while Kueue charges the capacity asked.
// So a request with capacity requests that gets such a device is refused, whatever its
// DeviceClass; a share is still charged by the compute it asks.
func TestWholeDeviceAskingForCapacity(t *testing.T) {
	const where = "spec.podSets[0] (main): ResourceClaimTemplate whole: spec.devices.requests[0].exactly.capacity.requests (request gpu) asks for compute 1"
	for _, tc := range []struct {
		what  string
		spec  string
		extra []client.Object
		// want: Rejected with a message holding each; none: Ready.
		want []string
	}{
		{"a whole GPU asking for compute 1 is refused before planning",
			`{devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.gpudra.dev, capacity: {requests: {compute: "1"}}}}]}}`, nil,
			[]string{where + ", but it gets a device of DeviceClass gpu.gpudra.dev, which the allocator gives whole",
				"a queue charges a whole device by its size", "drop capacity.requests"}},
		{"an NVLink group asking for compute and memory is refused",
			`{devices: {requests: [{name: gpu, exactly: {deviceClassName: nvlink-group-4.gpudra.dev, capacity: {requests: {compute: "1", memory: 1Gi}}}}]}}`, nil,
			[]string{"asks for compute 1, memory 1Gi, but it gets a device of DeviceClass nvlink-group-4.gpudra.dev"}},
		{"a class of one's own selecting whole GPUs: refused on the planned GPU",
			`{devices: {requests: [{name: gpu, exactly: {deviceClassName: whole.example.com, capacity: {requests: {compute: "1"}}}}]}}`,
			[]client.Object{ownClass("whole.example.com", api.TypeGPU)},
			[]string{where + ", but it gets device gpu-", "(its compute capacity, 100, in gpudra.dev/gpu-percent)"}},
		{"a class of one's own selecting NVLink groups: refused on the planned group",
			`{devices: {requests: [{name: gpu, exactly: {deviceClassName: groups.example.com, capacity: {requests: {compute: "1"}}}}]}}`,
			[]client.Object{ownClass("groups.example.com", api.TypeNVLinkGroup)},
			[]string{"but it gets device nvlink-", "which the allocator gives whole"}},
		{"a whole GPU with no capacity request is admitted",
			`{devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.gpudra.dev}}]}}`, nil, nil},
		{"a class of one's own selecting shares, asking for compute, is admitted",
			`{devices: {requests: [{name: gpu, exactly: {deviceClassName: shares.example.com, capacity: {requests: {compute: "10", memory: 1Gi}}}}]}}`,
			[]client.Object{ownClass("shares.example.com", api.TypeShare)}, nil},
	} {
		t.Run(tc.what, func(t *testing.T) {
			c := lab(t, wholeJob(t, tc.spec, tc.extra...)...)
			// gpudra explain says what the check will answer.
			if now := explainOf(t, c, "cheap").Now; (tc.want == nil) != (now.State == string(kueue.CheckStateReady)) ||
				(tc.want != nil && !strings.Contains(now.Message, tc.want[0])) {
				t.Errorf("explain: now %s %q", now.State, now.Message)
			}
			got := reconcile(t, newReconciler(c), "cheap")
			if tc.want == nil {
				if got.State != kueue.CheckStateReady {
					t.Fatalf("%s %q, want Ready", got.State, got.Message)
				}
				return
			}
			if got.State != kueue.CheckStateRejected {
				t.Fatalf("%s %q, want Rejected", got.State, got.Message)
			}
			for _, w := range tc.want {
				if !strings.Contains(got.Message, w) {
					t.Errorf("message %q lacks %q", got.Message, w)
				}
			}
		})
	}
}

package admission

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/driver/allocation"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

func TestExtendedResourceClasses(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Hour))
	class := func(name, ext string, created metav1.Time) resourceapi.DeviceClass {
		c := resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: created}}
		if ext != "" {
			c.Spec.ExtendedResourceName = ptr.To(ext)
		}
		return c
	}
	for _, tc := range []struct {
		name    string
		classes []resourceapi.DeviceClass
		want    map[corev1.ResourceName]string
	}{
		{name: "a class answers to its extendedResourceName and to its implicit name",
			classes: []resourceapi.DeviceClass{class("nvlink-group-4.gpudra.dev", "gpudra.dev/nvlink-group-4", t0), class("gpu.gpudra.dev", "", t0)},
			want: map[corev1.ResourceName]string{
				"gpudra.dev/nvlink-group-4":                                    "nvlink-group-4.gpudra.dev",
				"deviceclass.resource.kubernetes.io/nvlink-group-4.gpudra.dev": "nvlink-group-4.gpudra.dev",
				"deviceclass.resource.kubernetes.io/gpu.gpudra.dev":            "gpu.gpudra.dev",
			}},
		{name: "of two classes naming one resource the newer wins",
			classes: []resourceapi.DeviceClass{class("b-new", "example.com/x", t1), class("a-old", "example.com/x", t0)},
			want: map[corev1.ResourceName]string{"example.com/x": "b-new",
				"deviceclass.resource.kubernetes.io/a-old": "a-old", "deviceclass.resource.kubernetes.io/b-new": "b-new"}},
		{name: "of two classes created together the lower name wins",
			classes: []resourceapi.DeviceClass{class("b", "example.com/x", t0), class("a", "example.com/x", t0)},
			want: map[corev1.ResourceName]string{"example.com/x": "a",
				"deviceclass.resource.kubernetes.io/a": "a", "deviceclass.resource.kubernetes.io/b": "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := extendedResourceClasses(tc.classes); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestExtendedClaim(t *testing.T) {
	classes := map[corev1.ResourceName]string{"gpudra.dev/nvlink-group-4": "nvlink-group-4.gpudra.dev", "gpudra.dev/nvlink-group-2": "nvlink-group-2.gpudra.dev"}
	res := func(kv ...string) corev1.ResourceList {
		out := corev1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return out
	}
	container := func(requests, limits corev1.ResourceList) corev1.Container {
		return corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Requests: requests, Limits: limits}}
	}
	type want struct {
		class string
		count int64
	}
	for _, tc := range []struct {
		name string
		spec corev1.PodSpec
		want []want // nil = no claim
	}{
		{name: "a limit alone asks for the devices (the API server copies it to the request)",
			spec: corev1.PodSpec{Containers: []corev1.Container{container(res("cpu", "1"), res("gpudra.dev/nvlink-group-4", "1"))}},
			want: []want{{"nvlink-group-4.gpudra.dev", 1}}},
		{name: "containers add up, one request per resource",
			spec: corev1.PodSpec{Containers: []corev1.Container{
				container(nil, res("gpudra.dev/nvlink-group-4", "1", "gpudra.dev/nvlink-group-2", "1")),
				container(res("gpudra.dev/nvlink-group-4", "1"), res("gpudra.dev/nvlink-group-4", "1"))}},
			want: []want{{"nvlink-group-2.gpudra.dev", 1}, {"nvlink-group-4.gpudra.dev", 2}}},
		{name: "an init container asking for more than the containers sets the count",
			spec: corev1.PodSpec{
				InitContainers: []corev1.Container{container(nil, res("gpudra.dev/nvlink-group-2", "3"))},
				Containers:     []corev1.Container{container(nil, res("gpudra.dev/nvlink-group-2", "1"))}},
			want: []want{{"nvlink-group-2.gpudra.dev", 3}}},
		{name: "extended resources no DeviceClass names are not devices",
			spec: corev1.PodSpec{Containers: []corev1.Container{container(nil, res("example.com/fpga", "1", "cpu", "2"))}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := extendedClaim(&tc.spec, classes)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == nil {
				if got != nil {
					t.Fatalf("got claim %+v, want none", got)
				}
				return
			}
			if got == nil || len(got.Devices.Requests) != len(tc.want) {
				t.Fatalf("got %+v, want %v", got, tc.want)
			}
			for k, w := range tc.want {
				ex := got.Devices.Requests[k].Exactly
				if ex.DeviceClassName != w.class || ex.Count != w.count || ex.AllocationMode != resourceapi.DeviceAllocationModeExactCount {
					t.Errorf("request %d = %+v, want %d of %s", k, ex, w.count, w.class)
				}
			}
		})
	}
}

// groupJob is a Workload whose pods ask for one 4-GPU NVLink group each as the extended
// resource gpudra.dev/nvlink-group-4, with no claim templates.
func groupJob(name string, pods int32) *kueue.Workload {
	wl := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, UID: types.UID(name)}}
	wl.Spec.PodSets = []kueue.PodSet{{Name: "main", Count: pods, Template: corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{api.AnnotationRequiredTopology: "block"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "trainer", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{"gpudra.dev/nvlink-group-4": resource.MustParse("1")}}}}},
	}}}
	wl.Status.Conditions = []metav1.Condition{{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionTrue, Reason: "QuotaReserved", LastTransitionTime: metav1.Now()}}
	wl.Status.AdmissionChecks = []kueue.AdmissionCheckState{{Name: "gpudra-topology", State: kueue.CheckStatePending}}
	return wl
}

// TestCheckPlansNVLinkGroupsAskedAsExtendedResources: the check plans the group
// kube-scheduler will allocate for gpudra.dev/nvlink-group-4, with the shipped DeviceClasses
// — one per node of 4 NVLinked GPUs — and says Retry when the groups run out.
func TestCheckPlansNVLinkGroupsAskedAsExtendedResources(t *testing.T) {
	t.Run("eight pods get the eight nodes' 4-GPU groups", func(t *testing.T) {
		r := newReconciler(lab(t, groupJob("groups", 8)))
		got := reconcile(t, r, "groups")
		if got.State != kueue.CheckStateReady {
			t.Fatalf("state %s: %s", got.State, got.Message)
		}
		nodes := strings.Split(got.PodSetUpdates[0].Annotations[api.AnnotationPlacement], ",")
		if len(nodes) != 8 {
			t.Fatalf("placement %v, want 8 nodes", nodes)
		}
		if groups := plannedDevices(r, "groups"); len(groups) != 8 || !allNVLinkQuads(groups) {
			t.Errorf("planned devices %v, want eight 4-GPU NVLink groups", groups)
		}
	})
	t.Run("a ninth pod finds no group left and the gang waits", func(t *testing.T) {
		r := newReconciler(lab(t, groupJob("groups", 9)))
		if got := reconcile(t, r, "groups"); got.State != kueue.CheckStateRetry {
			t.Fatalf("state %s (%s), want Retry", got.State, got.Message)
		}
	})
}

// plannedDevices lists the devices the check reserved for a workload, one entry per claim.
func plannedDevices(r *Reconciler, uid types.UID) [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out [][]string
	for _, res := range r.reserved[uid].results {
		out = append(out, allocation.SortedDevices(res))
	}
	return out
}

func allNVLinkQuads(claims [][]string) bool {
	for _, devs := range claims {
		if len(devs) != 1 || !strings.HasPrefix(devs[0], "nvlink-") || strings.Count(devs[0], "-") != 4 {
			return false
		}
	}
	return true
}

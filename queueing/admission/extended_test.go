package admission

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	kueueconfig "sigs.k8s.io/kueue/apis/config/v1beta2"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/driver/simulated"
	"github.com/gpudra/gpudra/topology"

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

// devicePluginJob is a Workload whose pods ask for resources by the device plugin's names,
// with no claim templates.
func devicePluginJob(name string, pods int32, limits corev1.ResourceList) *kueue.Workload {
	wl := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, UID: types.UID(name)}}
	wl.Spec.PodSets = []kueue.PodSet{{Name: "main", Count: pods, Template: corev1.PodTemplateSpec{
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox", Resources: corev1.ResourceRequirements{Limits: limits}}}},
	}}}
	wl.Status.Conditions = []metav1.Condition{{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionTrue, Reason: "QuotaReserved", LastTransitionTime: metav1.Now()}}
	wl.Status.AdmissionChecks = []kueue.AdmissionCheckState{{Name: "gpudra-topology", State: kueue.CheckStatePending}}
	return wl
}

func shippedClassItems(t *testing.T) []resourceapi.DeviceClass {
	t.Helper()
	classes, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]resourceapi.DeviceClass, 0, len(classes))
	for _, c := range classes {
		out = append(out, *c)
	}
	return out
}

// kueueCharge is what the shipped Kueue configuration charges for a pod's extended
// resources: each transformed input replaced by its outputs (DRAExtendedResources off, so
// the container requests are what Kueue counts).
func kueueCharge(t *testing.T, spec *corev1.PodSpec) map[corev1.ResourceName]int64 {
	t.Helper()
	var cfg kueueconfig.Configuration
	if err := sigsyaml.UnmarshalStrict(deployments.KueueConfiguration, &cfg); err != nil {
		t.Fatal(err)
	}
	out := map[corev1.ResourceName]int64{}
	for _, c := range spec.Containers {
		for name, q := range c.Resources.Limits {
			tr := slices.IndexFunc(cfg.Resources.Transformations, func(tr kueueconfig.ResourceTransformation) bool { return tr.Input == name })
			if tr < 0 {
				out[name] += q.Value()
				continue
			}
			for o, per := range cfg.Resources.Transformations[tr].Outputs {
				out[o] += per.Value() * q.Value()
			}
		}
	}
	return out
}

// TestExtendedClaimOfDevicePluginNames: the check reads nvidia.com/gpu and
// nvidia.com/mig-<profile> the way kube-scheduler does, with the shipped DeviceClasses, into
// requests for whole GPUs and for MIG devices of that profile, and Kueue charges those pods
// what it charges claims for the same devices, in gpudra.dev/gpu-percent: a whole GPU 100, a
// 1g.10gb MIG device 25 (a quarter of an A100 40GB, the largest part of a GPU it is on any
// model).
func TestExtendedClaimOfDevicePluginNames(t *testing.T) {
	items := shippedClassItems(t)
	classes := extendedResourceClasses(items)
	mig := corev1.ResourceName(api.ExtendedResourceNVIDIAMIG("1g.10gb"))
	for _, tc := range []struct {
		name   string
		limits corev1.ResourceList
		want   map[string]int64 // class → count
		charge map[corev1.ResourceName]int64
	}{
		{name: "nvidia.com/gpu: 2 is two whole GPUs",
			limits: corev1.ResourceList{api.ExtendedResourceNVIDIAGPU: resource.MustParse("2"), "cpu": resource.MustParse("1")},
			want:   map[string]int64{api.DeviceClassGPU: 2},
			charge: map[corev1.ResourceName]int64{api.QuotaGPUPercent: 200, "cpu": 1}},
		{name: "nvidia.com/mig-1g.10gb: 1 is one 1g.10gb MIG device",
			limits: corev1.ResourceList{mig: resource.MustParse("1")},
			want:   map[string]int64{api.DeviceClassMIGProfile("1g.10gb"): 1},
			charge: map[corev1.ResourceName]int64{api.QuotaGPUPercent: 25}},
		{name: "both at once, one request each",
			limits: corev1.ResourceList{api.ExtendedResourceNVIDIAGPU: resource.MustParse("1"), mig: resource.MustParse("3")},
			want:   map[string]int64{api.DeviceClassGPU: 1, api.DeviceClassMIGProfile("1g.10gb"): 3},
			charge: map[corev1.ResourceName]int64{api.QuotaGPUPercent: 100 + 3*25}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := &corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Limits: tc.limits}}}}
			claim, err := extendedClaim(spec, classes)
			if err != nil || claim == nil {
				t.Fatalf("claim %+v, err %v", claim, err)
			}
			got := map[string]int64{}
			for _, r := range claim.Devices.Requests {
				ex := r.Exactly
				if ex.AllocationMode != resourceapi.DeviceAllocationModeExactCount {
					t.Errorf("request %s: allocation mode %s", r.Name, ex.AllocationMode)
				}
				got[ex.DeviceClassName] += ex.Count
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("requests %v, want %v", got, tc.want)
			}
			charge := kueueCharge(t, spec)
			if !reflect.DeepEqual(charge, tc.charge) {
				t.Errorf("Kueue charges %v, want %v", charge, tc.charge)
			}
		})
	}
}

// TestCheckPlansDevicePluginRequests: the check plans what kube-scheduler will allocate for
// the device plugin's names: two whole GPUs per pod of nvidia.com/gpu: 2, until the lab's
// GPUs run out; and for the GPU Operator's MIG example (five pods of
// nvidia.com/mig-1g.10gb: 1) five distinct 1g.10gb devices of a dynamic-MIG H100 node.
func TestCheckPlansDevicePluginRequests(t *testing.T) {
	gpus := corev1.ResourceList{api.ExtendedResourceNVIDIAGPU: resource.MustParse("2")}
	t.Run("sixteen pods of two GPUs fill the lab's 32 GPUs", func(t *testing.T) {
		r := newReconciler(lab(t, devicePluginJob("cuda", 16, gpus)))
		if got := reconcile(t, r, "cuda"); got.State != kueue.CheckStateReady {
			t.Fatalf("state %s: %s", got.State, got.Message)
		}
		planned := plannedDevices(r, "cuda")
		if len(planned) != 16 {
			t.Fatalf("planned %v, want 16 claims", planned)
		}
		for _, devs := range planned {
			if len(devs) != 2 || !wholeGPU.MatchString(devs[0]) || !wholeGPU.MatchString(devs[1]) {
				t.Errorf("planned %v, want two whole GPUs per pod", devs)
			}
		}
	})
	t.Run("a seventeenth pod waits", func(t *testing.T) {
		r := newReconciler(lab(t, devicePluginJob("cuda", 17, gpus)))
		if got := reconcile(t, r, "cuda"); got.State != kueue.CheckStateRetry {
			t.Fatalf("state %s (%s), want Retry", got.State, got.Message)
		}
	})
	t.Run("the GPU Operator's MIG example", func(t *testing.T) {
		wl := devicePluginJob("example-mig", 5, corev1.ResourceList{corev1.ResourceName(api.ExtendedResourceNVIDIAMIG("1g.10gb")): resource.MustParse("1")})
		c, profileOf := migLab(t, wl)
		r := newReconciler(c)
		if got := reconcile(t, r, "example-mig"); got.State != kueue.CheckStateReady {
			t.Fatalf("state %s: %s", got.State, got.Message)
		}
		seen := map[string]bool{}
		for _, devs := range plannedDevices(r, "example-mig") {
			if len(devs) != 1 || profileOf[devs[0]] != "1g.10gb" || seen[devs[0]] {
				t.Fatalf("planned %v (so far %v), want one more 1g.10gb MIG device per pod", devs, seen)
			}
			seen[devs[0]] = true
		}
		if len(seen) != 5 {
			t.Errorf("planned %d MIG devices, want 5", len(seen))
		}
	})
}

var wholeGPU = regexp.MustCompile(`^gpu-\d+$`)

// migLab is a fake API server with the shipped DeviceClasses, the AdmissionCheck and one
// simulated DGX H100 node publishing dynamic MIG; it also returns each MIG device's profile.
func migLab(t *testing.T, extra ...client.Object) (client.Client, map[string]string) {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, resourceapi.AddToScheme, kueue.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	objs := []client.Object{
		&kueue.AdmissionCheck{ObjectMeta: metav1.ObjectMeta{Name: "gpudra-topology"}, Spec: kueue.AdmissionCheckSpec{ControllerName: api.AdmissionCheckController}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "mig-1", Labels: map[string]string{api.LabelBlock: "b1", api.LabelRack: "r1", topology.LabelHostname: "mig-1"}}},
	}
	for _, c := range shippedClassItems(t) {
		objs = append(objs, &c)
	}
	_, rs, err := simulated.Slices("dgx-h100", "mig-1", driver.RenderOptions{MIG: driver.MIGDynamic})
	if err != nil {
		t.Fatal(err)
	}
	profileOf := map[string]string{}
	for _, s := range rs {
		objs = append(objs, s)
		for _, d := range s.Spec.Devices {
			if a := d.Attributes[api.AttrMIGProfile]; a.StringValue != nil {
				profileOf[d.Name] = *a.StringValue
			}
		}
	}
	objs = append(objs, extra...)
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&kueue.Workload{}, &kueue.AdmissionCheck{}).Build(), profileOf
}

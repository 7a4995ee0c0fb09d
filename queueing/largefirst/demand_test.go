package largefirst

import (
	"context"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

const ns = "team-a"

// template is a ResourceClaimTemplate in ns with one request per given request.
func template(name string, reqs ...resourceapi.ExactDeviceRequest) *resourceapi.ResourceClaimTemplate {
	t := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for k := range reqs {
		t.Spec.Spec.Devices.Requests = append(t.Spec.Spec.Devices.Requests, resourceapi.DeviceRequest{Name: "r", Exactly: &reqs[k]})
	}
	return t
}

func devices(class string, count int64) resourceapi.ExactDeviceRequest {
	return resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}
}

func share(compute string) resourceapi.ExactDeviceRequest {
	r := devices(api.DeviceClassShare, 1)
	r.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{api.CapCompute: resource.MustParse(compute)}}
	return r
}

// job is a queued Job in ns of parallelism pods whose pods name the claim templates.
func job(name string, parallelism int32, templates ...string) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{QueueNameLabel: "gpus"}}}
	j.Spec.Parallelism = ptr.To(parallelism)
	j.Spec.Template.Spec.Containers = []corev1.Container{{Name: "main"}}
	for _, t := range templates {
		j.Spec.Template.Spec.ResourceClaims = append(j.Spec.Template.Spec.ResourceClaims, corev1.PodResourceClaim{Name: t, ResourceClaimTemplateName: ptr.To(t)})
	}
	return j
}

// limits gives the job's container these extended resources.
func limits(j *batchv1.Job, rl corev1.ResourceList) *batchv1.Job {
	j.Spec.Template.Spec.Containers[0].Resources.Limits = rl
	return j
}

func newClient(t *testing.T, objs ...client.Object) client.WithWatch {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{batchv1.AddToScheme, resourceapi.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
}

func TestDemandCountsGPUsAsKueueCharges(t *testing.T) {
	templates := []client.Object{
		template("one-gpu", devices(api.DeviceClassGPU, 1)),
		template("four-gpus", devices(api.DeviceClassGPU, 4)),
		template("group-4", devices(api.DeviceClassNVLinkGroupOf(4), 1)),
		template("any-group", devices(api.DeviceClassNVLinkGroup, 1)),
		template("linked-4", devices(api.DeviceClassGPUGroupOf(4), 1)),
		template("xgmi-group", devices(api.DeviceClassXGMIGroup, 1)),
		template("half-share", share("50")),
		template("mig", devices(api.DeviceClassMIG, 2)),
		template("all-gpus", resourceapi.ExactDeviceRequest{DeviceClassName: api.DeviceClassGPU, AllocationMode: resourceapi.DeviceAllocationModeAll}),
		template("gpu-and-share", devices(api.DeviceClassGPU, 1), share("25")),
		template("any-vendor", devices(api.DeviceClassAnyGPU, 2)),
		template("amd", devices(api.DeviceClassAMDGPU, 4)),
	}
	gpus := func(n int64) corev1.ResourceList {
		return corev1.ResourceList{api.ExtendedResourceNVIDIAGPU: *resource.NewQuantity(n, resource.DecimalSI)}
	}
	for _, tc := range []struct {
		name string
		job  *batchv1.Job
		want int64
	}{
		{name: "one whole GPU", job: job("a", 1, "one-gpu"), want: 100},
		{name: "times parallelism: 32 one-GPU pods", job: job("a", 32, "one-gpu"), want: 3200},
		{name: "completions below parallelism count", job: func() *batchv1.Job { j := job("a", 8, "four-gpus"); j.Spec.Completions = ptr.To[int32](2); return j }(), want: 800},
		{name: "a sized NVLink group counts its GPUs", job: job("a", 8, "group-4"), want: 3200},
		{name: "a group of any size counts the smallest", job: job("a", 1, "any-group"), want: 200},
		{name: "a sized group of either vendor counts its GPUs", job: job("a", 2, "linked-4"), want: 800},
		{name: "an XGMI group of any size counts the smallest", job: job("a", 1, "xgmi-group"), want: 200},
		{name: "a share counts its compute", job: job("a", 4, "half-share"), want: 200},
		{name: "several claims and requests add up", job: job("a", 2, "four-gpus", "gpu-and-share"), want: 2 * (400 + 100 + 25)},
		{name: "MIG devices count nothing", job: job("a", 8, "mig"), want: 0},
		{name: "allocation mode All counts nothing", job: job("a", 1, "all-gpus"), want: 0},
		{name: "a template not created yet counts nothing", job: job("a", 4, "later"), want: 0},
		{name: "nvidia.com/gpu", job: limits(job("a", 4), gpus(8)), want: 3200},
		{name: "an NVLink group extended resource", job: limits(job("a", 2), corev1.ResourceList{"gpudra.dev/nvlink-group-8": resource.MustParse("1")}), want: 1600},
		{name: "a class's implicit extended resource", job: limits(job("a", 3), corev1.ResourceList{"deviceclass.resource.kubernetes.io/gpu.gpudra.dev": resource.MustParse("2")}), want: 600},
		{name: "GPUs of any vendor count as NVIDIA's", job: job("a", 2, "any-vendor", "amd"), want: 2 * (200 + 400)},
		{name: "AMD's and Hygon's device plugin names", job: limits(job("a", 1), corev1.ResourceList{api.ExtendedResourceAMDGPU: resource.MustParse("2"), api.ExtendedResourceHygonDCU: resource.MustParse("1")}), want: 300},
		{name: "CPU and memory count nothing", job: limits(job("a", 64), corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}), want: 0},
		{name: "claims and extended resources add up", job: limits(job("a", 2, "one-gpu"), gpus(1)), want: 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Demand(context.Background(), newClient(t, templates...), tc.job)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("demand = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestDemandCountsTheLargerOfInitAndMainContainers(t *testing.T) {
	j := limits(job("a", 1), corev1.ResourceList{api.ExtendedResourceNVIDIAGPU: resource.MustParse("2")})
	j.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "warm", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{api.ExtendedResourceNVIDIAGPU: resource.MustParse("4")}}}}
	got, err := Demand(context.Background(), newClient(t), j)
	if err != nil {
		t.Fatal(err)
	}
	if got != 400 {
		t.Errorf("demand = %d, want 400 (the init container's 4 GPUs)", got)
	}
}

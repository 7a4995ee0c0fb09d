package webview

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/driver/simulated"
)

const (
	testNS    = "team-a"
	nodeA     = "gpu-node-a"
	nodeB     = "gpu-node-b"
	unhealthy = 7 // GPU index tainted unhealthy on nodeB

	oneGPUTemplate = "one-gpu"
)

// fixture is a cluster of two DGX H100 nodes (8 GPUs each): on nodeA one GPU is allocated
// whole to pod train-0 and one GPU is shared by the two pods of the gang "infer"; nodeB
// is free but for an unhealthy GPU. Kueue has a cohort, two ClusterQueues and a pending
// Workload the topology check answered, for two pods with one GPU each from the claim
// template oneGPUTemplate.
type fixture struct {
	kube    *fake.Clientset
	dyn     *dynamicfake.FakeDynamicClient
	state   *allocation.State
	srv     *Server
	http    *httptest.Server
	classes []*resourceapi.DeviceClass
}

func wholeClaim(name string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, UID: types.UID("uid-" + name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name:    "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: api.DeviceClassGPU, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
		}}}},
	}
}

func shareClaim(name string, gpu int, memory string, compute int64) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, UID: types.UID("uid-" + name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "share",
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: api.DeviceClassShare, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
					Expression: `device.attributes["gpu.gpudra.dev"].index == ` + itoa(gpu)}}},
				Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
					api.CapMemory:  resource.MustParse(memory),
					api.CapCompute: *resource.NewQuantity(compute, resource.DecimalSI),
				}},
			},
		}}}},
	}
}

func itoa(n int) string { return resource.NewQuantity(int64(n), resource.DecimalSI).String() }

// allocate allocates claim on node with the real allocator and reserves it for pod.
func (f *fixture) allocate(t *testing.T, claim *resourceapi.ResourceClaim, node, pod string) {
	t.Helper()
	res, err := f.state.AllocateAndCommit(context.Background(), node, claim)
	if err != nil {
		t.Fatalf("allocating %s on %s: %v", claim.Name, node, err)
	}
	claim.Status.Allocation = &res[0]
	if pod != "" {
		claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod, UID: types.UID("uid-" + pod)}}
	}
}

func gpuPod(name, owner, node string, claims ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, UID: types.UID("uid-" + name),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: owner, UID: types.UID("uid-" + owner), Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "cuda"}}},
	}
	if node != "" {
		p.Status.Phase = corev1.PodRunning
	} else {
		p.Status.Phase = corev1.PodPending
	}
	for _, c := range claims {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: c, ResourceClaimName: ptr.To(c)})
	}
	return p
}

func toUnstructured(t *testing.T, obj runtime.Object, kind string) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(KueueGroupVersion.String())
	u.SetKind(kind)
	return u
}

func kueueObjects(t *testing.T) []runtime.Object {
	quota := func(n string) kueue.ResourceGroup {
		return kueue.ResourceGroup{
			CoveredResources: []corev1.ResourceName{api.QuotaGPUPercent},
			Flavors: []kueue.FlavorQuotas{{Name: "h100", Resources: []kueue.ResourceQuota{{
				Name: api.QuotaGPUPercent, NominalQuota: resource.MustParse(n)}}}},
		}
	}
	cqA := &kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: "team-a"},
		Spec: kueue.ClusterQueueSpec{CohortName: "research", ResourceGroups: []kueue.ResourceGroup{quota("800")},
			AdmissionChecksStrategy: &kueue.AdmissionChecksStrategy{AdmissionChecks: []kueue.AdmissionCheckStrategyRule{{Name: "gpudra-topology"}}}},
		Status: kueue.ClusterQueueStatus{PendingWorkloads: 1, AdmittedWorkloads: 2, ReservingWorkloads: 2,
			FlavorsUsage: []kueue.FlavorUsage{{Name: "h100", Resources: []kueue.ResourceUsage{{Name: api.QuotaGPUPercent, Total: resource.MustParse("650")}}}}}}
	// team-b's Kueue charges whole GPUs by count: 5 GPUs in gpudra.dev/gpu and 3 in
	// gpudra.dev/gpu-percent make 8, of which it uses 2 whole GPUs and half a GPU in shares.
	cqB := &kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: "team-b"},
		Spec: kueue.ClusterQueueSpec{CohortName: "research", ResourceGroups: []kueue.ResourceGroup{{
			CoveredResources: []corev1.ResourceName{api.QuotaGPUPercent, api.QuotaGPU},
			Flavors: []kueue.FlavorQuotas{{Name: "h100", Resources: []kueue.ResourceQuota{
				{Name: api.QuotaGPUPercent, NominalQuota: resource.MustParse("300")},
				{Name: api.QuotaGPU, NominalQuota: resource.MustParse("5")}}}}}}},
		Status: kueue.ClusterQueueStatus{FlavorsUsage: []kueue.FlavorUsage{{Name: "h100", Resources: []kueue.ResourceUsage{
			{Name: api.QuotaGPUPercent, Total: resource.MustParse("50")}, {Name: api.QuotaGPU, Total: resource.MustParse("2")}}}}}}
	cohort := &kueue.Cohort{ObjectMeta: metav1.ObjectMeta{Name: "research"}}
	lq := &kueue.LocalQueue{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "default"}, Spec: kueue.LocalQueueSpec{ClusterQueue: "team-a"}}
	ac := &kueue.AdmissionCheck{ObjectMeta: metav1.ObjectMeta{Name: "gpudra-topology"}, Spec: kueue.AdmissionCheckSpec{ControllerName: api.AdmissionCheckController}}
	wl := &kueue.Workload{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "job-big-train-1a2b3", CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "big-train", UID: "uid-big-train"}}},
		Spec: kueue.WorkloadSpec{QueueName: "default", Priority: ptr.To[int32](100), PodSets: []kueue.PodSet{{Name: "main", Count: 2,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "cuda"}},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(oneGPUTemplate)}}}}}}},
		Status: kueue.WorkloadStatus{
			Conditions: []metav1.Condition{{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionTrue, Reason: "QuotaReserved", LastTransitionTime: metav1.Now()}},
			AdmissionChecks: []kueue.AdmissionCheckState{{Name: "gpudra-topology", State: kueue.CheckStatePending,
				Message: "pod set main: 16 pods need one rack; the best rack fits 7 now", LastTransitionTime: metav1.Now()}},
		},
	}
	return []runtime.Object{
		toUnstructured(t, cqA, "ClusterQueue"), toUnstructured(t, cqB, "ClusterQueue"), toUnstructured(t, cohort, "Cohort"),
		toUnstructured(t, lq, "LocalQueue"), toUnstructured(t, ac, "AdmissionCheck"), toUnstructured(t, wl, "Workload"),
	}
}

// newDynamic is a fake dynamic client holding kueueObjects.
func newDynamic(t *testing.T) *dynamicfake.FakeDynamicClient {
	listKinds := map[schema.GroupVersionResource]string{}
	for _, gvr := range KueueResources {
		listKinds[gvr] = map[string]string{
			"clusterqueues": "ClusterQueueList", "cohorts": "CohortList", "localqueues": "LocalQueueList",
			"workloads": "WorkloadList", "admissionchecks": "AdmissionCheckList",
		}[gvr.Resource]
	}
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, kueueObjects(t)...)
}

func readyNode(name, rack string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name, api.LabelRack: rack}},
		Status: corev1.NodeStatus{
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200"), corev1.ResourceMemory: resource.MustParse("2Ti"), corev1.ResourcePods: resource.MustParse("110")},
		},
	}
}

// newFixture starts the Server over the fixture's fake clients and serves it on 127.0.0.1.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	classes, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	var sl []*resourceapi.ResourceSlice
	for _, n := range []string{nodeA, nodeB} {
		opts := driver.RenderOptions{}
		if n == nodeB {
			opts.Taints = map[int][]resourceapi.DeviceTaint{unhealthy: {{Key: api.TaintUnhealthy, Value: "XidCritical", Effect: resourceapi.DeviceTaintEffectNoSchedule}}}
		}
		_, rs, err := simulated.Slices("dgx-h100", n, opts)
		if err != nil {
			t.Fatal(err)
		}
		sl = append(sl, rs...)
	}
	f := &fixture{state: allocation.New(classes, sl), classes: classes}
	train := wholeClaim("train-0-gpu")
	f.allocate(t, train, nodeA, "train-0")
	infer0 := shareClaim("infer-0-share", 1, "20Gi", 30)
	f.allocate(t, infer0, nodeA, "infer-0")
	infer1 := shareClaim("infer-1-share", 1, "40Gi", 50)
	f.allocate(t, infer1, nodeA, "infer-1")

	oneGPU := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: oneGPUTemplate},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: wholeClaim("").Spec}}
	objs := []runtime.Object{readyNode(nodeA, "rack-1"), readyNode(nodeB, "rack-1"), train, infer0, infer1, oneGPU,
		gpuPod("train-0", "train", nodeA, train.Name), gpuPod("infer-0", "infer", nodeA, infer0.Name), gpuPod("infer-1", "infer", nodeA, infer1.Name)}
	for _, s := range sl {
		objs = append(objs, s)
	}
	for _, c := range classes {
		objs = append(objs, c)
	}
	f.kube = fake.NewClientset(objs...)
	f.kube.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{
		GroupVersion: KueueGroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: "clusterqueues", Kind: "ClusterQueue"}, {Name: "workloads", Namespaced: true, Kind: "Workload"}},
	}}
	f.dyn = newDynamic(t)

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f.srv, err = New(Options{Kube: f.kube, Dynamic: f.dyn, Debounce: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	f.http = httptest.NewServer(f.srv)
	t.Cleanup(f.http.Close)
	// The fake clientset's informers list, then watch: wait for the watch before the test
	// creates objects.
	waitWatching(t, f)
	return f
}

// waitWatching waits until changes made through the fake client reach the pod and claim
// informers.
func waitWatching(t *testing.T, f *fixture) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for k := 0; ; k++ {
		name := "probe-" + itoa(k)
		if _, err := f.kube.CoreV1().Pods("kube-system").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.kube.ResourceV1().ResourceClaims("kube-system").Create(ctx, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		seen := false
		for n := 0; n < 20 && !seen; n++ {
			src := f.srv.src.(*informerSource)
			_, errPod := src.podL.Pods("kube-system").Get(name)
			_, errClaim := src.claimL.ResourceClaims("kube-system").Get(name)
			seen = errPod == nil && errClaim == nil
			if !seen {
				time.Sleep(10 * time.Millisecond)
			}
		}
		_ = f.kube.CoreV1().Pods("kube-system").Delete(ctx, name, metav1.DeleteOptions{})
		_ = f.kube.ResourceV1().ResourceClaims("kube-system").Delete(ctx, name, metav1.DeleteOptions{})
		if seen {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the informers never saw objects created through the fake client")
		}
	}
}

// addKFDNode adds a ready node whose devices are a simulated AMD or Hygon node's
// (driver/kfdsim profile) and waits until the cluster page shows it.
func (f *fixture) addKFDNode(t *testing.T, name, profile string) {
	t.Helper()
	ctx := context.Background()
	_, sl, err := simulated.KFDSlices(profile, name, driver.RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.kube.CoreV1().Nodes().Create(ctx, readyNode(name, "rack-2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range sl {
		if _, err := f.kube.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, func() bool {
		_, page := fetch(t, f.http.URL+"/nodes/"+name)
		return strings.Contains(page, "<h1>Node "+name+"</h1>") && !strings.Contains(page, "no node "+name)
	})
}

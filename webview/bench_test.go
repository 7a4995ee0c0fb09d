package webview

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/simulated"
)

// Size of the benchmark cluster: DGX H100 nodes (8 GPUs each) with claimsPerNode
// allocated claims each, one pod per claim.
const (
	benchNodes         = 1000
	benchClaimsPerNode = 10
	benchQueues        = 20
	benchWorkloads     = 2000
)

// listSource is a source over fixed lists, so that a benchmark times the pages and not
// informers.
type listSource struct {
	nodeList  []*corev1.Node
	podList   []*corev1.Pod
	sliceList []*resourceapi.ResourceSlice
	claimList []*resourceapi.ResourceClaim
	classList []*resourceapi.DeviceClass
	kueueObjs map[schema.GroupVersionResource][]kruntime.Object
}

func (s *listSource) start(context.Context, func()) error { return nil }
func (s *listSource) nodes(context.Context) ([]*corev1.Node, error) {
	return s.nodeList, nil
}
func (s *listSource) pods(context.Context) ([]*corev1.Pod, error) { return s.podList, nil }
func (s *listSource) slices(context.Context) ([]*resourceapi.ResourceSlice, error) {
	return s.sliceList, nil
}
func (s *listSource) claims(context.Context) ([]*resourceapi.ResourceClaim, error) {
	return s.claimList, nil
}
func (s *listSource) classes(context.Context) ([]*resourceapi.DeviceClass, error) {
	return s.classList, nil
}
func (s *listSource) kueueServed() bool                          { return true }
func (s *listSource) kueueRead(schema.GroupVersionResource) bool { return true }
func (s *listSource) kueueList(_ context.Context, gvr schema.GroupVersionResource) []kruntime.Object {
	return s.kueueObjs[gvr]
}

func (s *listSource) claimTemplate(_ context.Context, _, name string) (*resourceapi.ResourceClaimTemplate, error) {
	return nil, apierrors.NewNotFound(templatesResource, name)
}
func (s *listSource) resourceFlavor(_ context.Context, name string) (*kueue.ResourceFlavor, error) {
	return nil, apierrors.NewNotFound(resourceFlavorsResource, name)
}
func (s *listSource) job(_ context.Context, _, name string) (*batchv1.Job, error) {
	return nil, apierrors.NewNotFound(jobsResource, name)
}

// benchCluster is benchNodes DGX H100 nodes whose slices the driver renders, GPUs 0-3 of
// each allocated whole, GPUs 4-6 shared by two claims each, GPU 7 free; a pod per claim;
// one pending pod asking for one GPU; ClusterQueues, LocalQueues and Workloads as the
// informers store them (typed).
func benchCluster(b *testing.B) *listSource {
	b.Helper()
	classes, err := deployments.DeviceClasses()
	if err != nil {
		b.Fatal(err)
	}
	inv, err := simulated.Inventory("dgx-h100", "bench")
	if err != nil {
		b.Fatal(err)
	}
	pool, err := driver.Render(inv, driver.RenderOptions{})
	if err != nil {
		b.Fatal(err)
	}
	src := &listSource{classList: classes, kueueObjs: map[schema.GroupVersionResource][]kruntime.Object{}}
	for n := range benchNodes {
		node := fmt.Sprintf("gpu-node-%04d", n)
		src.nodeList = append(src.nodeList, readyNode(node, fmt.Sprintf("rack-%d", n/32)))
		src.sliceList = append(src.sliceList, pool.ResourceSlices(node, 1)...)
		for k := range benchClaimsPerNode {
			name := fmt.Sprintf("%s-c%d", node, k)
			ns := fmt.Sprintf("team-%d", n%10)
			var cl *resourceapi.ResourceClaim
			var res resourceapi.DeviceRequestAllocationResult
			if k < 4 {
				cl = wholeClaim(name)
				res = resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: api.DriverName, Pool: node, Device: driver.GPUDeviceName(k)}
			} else {
				gpu := 4 + (k-4)/2
				cl = shareClaim(name, gpu, "20Gi", 30)
				res = resourceapi.DeviceRequestAllocationResult{Request: "share", Driver: api.DriverName, Pool: node, Device: driver.ShareDeviceName(gpu),
					ShareID: ptr.To(types.UID(fmt.Sprintf("share-%d-%d", n, k))),
					ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{
						api.CapMemory: resource.MustParse("20Gi"), api.CapCompute: *resource.NewQuantity(30, resource.DecimalSI)}}
			}
			cl.Namespace = ns
			pod := fmt.Sprintf("%s-p%d", node, k)
			cl.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{res}}}
			cl.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod, UID: types.UID("uid-" + pod)}}
			src.claimList = append(src.claimList, cl)
			p := gpuPod(pod, fmt.Sprintf("job-%d", (n*benchClaimsPerNode+k)/8), node, cl.Name)
			p.Namespace = ns
			src.podList = append(src.podList, p)
		}
	}
	pending := wholeClaim("pending-gpu")
	src.claimList = append(src.claimList, pending)
	src.podList = append(src.podList, gpuPod("pending", "pending", "", pending.Name))

	for q := range benchQueues {
		cq := &kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cq-%d", q)},
			Spec: kueue.ClusterQueueSpec{CohortName: "research", ResourceGroups: []kueue.ResourceGroup{{
				CoveredResources: []corev1.ResourceName{api.QuotaGPUPercent},
				Flavors: []kueue.FlavorQuotas{{Name: "h100", Resources: []kueue.ResourceQuota{{
					Name: api.QuotaGPUPercent, NominalQuota: resource.MustParse("40000")}}}}}}}}
		src.kueueObjs[clusterQueuesGVR] = append(src.kueueObjs[clusterQueuesGVR], benchKueue(b, cq, "ClusterQueue"))
		lq := &kueue.LocalQueue{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("team-%d", q%10), Name: fmt.Sprintf("lq-%d", q)},
			Spec: kueue.LocalQueueSpec{ClusterQueue: kueue.ClusterQueueReference(cq.Name)}}
		src.kueueObjs[localQueuesGVR] = append(src.kueueObjs[localQueuesGVR], benchKueue(b, lq, "LocalQueue"))
	}
	src.kueueObjs[cohortsGVR] = []kruntime.Object{benchKueue(b, &kueue.Cohort{ObjectMeta: metav1.ObjectMeta{Name: "research"}}, "Cohort")}
	src.kueueObjs[admissionChecksGVR] = []kruntime.Object{benchKueue(b, &kueue.AdmissionCheck{ObjectMeta: metav1.ObjectMeta{Name: "gpudra-topology"},
		Spec: kueue.AdmissionCheckSpec{ControllerName: api.AdmissionCheckController}}, "AdmissionCheck")}
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for w := range benchWorkloads {
		wl := &kueue.Workload{
			ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("team-%d", w%10), Name: fmt.Sprintf("job-%d", w), CreationTimestamp: metav1.NewTime(created.Add(time.Duration(w) * time.Second)),
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: fmt.Sprintf("job-%d", w), UID: types.UID(fmt.Sprintf("uid-job-%d", w))}}},
			Spec: kueue.WorkloadSpec{QueueName: kueue.LocalQueueName(fmt.Sprintf("lq-%d", w%benchQueues)), Priority: ptr.To[int32](int32(w % 3))},
			Status: kueue.WorkloadStatus{
				Conditions: []metav1.Condition{{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionFalse, Reason: "Pending", Message: "couldn't assign flavors", LastTransitionTime: metav1.NewTime(created)}},
			},
		}
		if w%2 == 0 {
			wl.Status.Conditions = []metav1.Condition{{Type: kueue.WorkloadAdmitted, Status: metav1.ConditionTrue, Reason: "Admitted", LastTransitionTime: metav1.NewTime(created)}}
		}
		src.kueueObjs[workloadsGVR] = append(src.kueueObjs[workloadsGVR], benchKueue(b, wl, "Workload"))
	}
	return src
}

// benchKueue is obj as the Kueue informers store it: typed (typedKueue).
func benchKueue(b *testing.B, obj kruntime.Object, kind string) kruntime.Object {
	b.Helper()
	return obj
}

// benchServer is a started Server over the benchmark cluster.
func benchServer(b *testing.B) (*Server, *listSource) {
	b.Helper()
	src := benchCluster(b)
	s, err := New(Options{Kube: fake.NewClientset()})
	if err != nil {
		b.Fatal(err)
	}
	s.src = src
	if err := s.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	return s, src
}

// benchPage serves path once per iteration, failing on a status other than 200. A first
// request, not timed, builds the model every later request shares until the cluster
// changes (BenchmarkBuildModel times that).
func benchPage(b *testing.B, s *Server, path string) {
	b.Helper()
	b.ReportAllocs()
	s.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, path, nil))
	size := 0
	for b.Loop() {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		if w.Code != http.StatusOK {
			b.Fatalf("GET %s: %d %s", path, w.Code, w.Body.String())
		}
		size = w.Body.Len()
	}
	b.ReportMetric(float64(size)/1024, "page-KiB")
}

// reportModelHeap reports the heap the joined-up model of the cluster takes.
func reportModelHeap(b *testing.B, s *Server) {
	b.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	sc := &scope{ctx: b.Context(), seen: map[accessKey]bool{}}
	c, err := s.build(sc)
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(c)
	b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/(1<<20), "model-MiB")
}

func BenchmarkRenderCluster(b *testing.B) {
	s, _ := benchServer(b)
	benchPage(b, s, "/")
	reportModelHeap(b, s)
}

// BenchmarkRenderClusterAll is the cluster page with every node on one page.
func BenchmarkRenderClusterAll(b *testing.B) {
	s, _ := benchServer(b)
	benchPage(b, s, "/?limit=1000")
}

func BenchmarkRenderNode(b *testing.B) {
	s, _ := benchServer(b)
	benchPage(b, s, "/nodes/gpu-node-0500")
}

func BenchmarkRenderQueues(b *testing.B) {
	s, _ := benchServer(b)
	benchPage(b, s, "/queues")
}

func BenchmarkRenderPodExplain(b *testing.B) {
	s, _ := benchServer(b)
	benchPage(b, s, "/pods/"+testNS+"/pending")
}

// BenchmarkBuildModel builds the model of the cluster, as the first request after each
// burst of changes does.
func BenchmarkBuildModel(b *testing.B) {
	s, _ := benchServer(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.build(&scope{ctx: b.Context(), seen: map[accessKey]bool{}}); err != nil {
			b.Fatal(err)
		}
	}
	reportModelHeap(b, s)
}

// BenchmarkRenderDefrag is the defragmentation page as the requests after the first see it:
// one report and plan shared.
func BenchmarkRenderDefrag(b *testing.B) {
	s, _ := benchServer(b)
	benchPage(b, s, "/defrag")
}

// BenchmarkPlanDefrag measures the cluster and plans to free a node, as the first request
// after a change does (at most every 10 s).
func BenchmarkPlanDefrag(b *testing.B) {
	s, _ := benchServer(b)
	b.ReportAllocs()
	for b.Loop() {
		s.defragMu.Lock()
		s.defrag = nil
		s.defragMu.Unlock()
		if _, err := s.defragPlan(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}

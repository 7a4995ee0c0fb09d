package lab

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	sigsyaml "sigs.k8s.io/yaml"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

const kueueSamples = "../deployments/kueue"

func rackNode(name, rack string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{api.LabelRack: rack}}}
}

// gangPod is a running pod of the Job with uid on node, holding claim.
func gangPod(ns, name string, uid types.UID, node, claim string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{batchv1.ControllerUidLabel: string(uid)}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if claim != "" {
		p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpus", ResourceClaimName: ptr.To(claim)}}
	}
	return p
}

// allocatedClaim is a claim allocated devices of node's pool (none: not allocated).
func allocatedClaim(ns, name, node string, devices ...string) *resourcev1.ResourceClaim {
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if len(devices) > 0 {
		c.Status.Allocation = &resourcev1.AllocationResult{}
		for _, d := range devices {
			c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
				resourcev1.DeviceRequestAllocationResult{Request: "gpus", Driver: api.DriverName, Pool: node, Device: d})
		}
	}
	return c
}

// tableColumns splits each line of a table into its columns.
func tableColumns(table string) [][]string {
	var out [][]string
	for _, l := range strings.Split(strings.TrimSpace(table), "\n") {
		out = append(out, strings.Fields(l))
	}
	return out
}

// TestGangTableShowsNodeRackAndGPUsOfEachPod: the gang table has one line per pod, in pod
// order, with its node, the node's rack label and the devices of its claim; a pod whose
// claim is not allocated yet shows no GPUs, and gangRows leaves out other pods' claims.
func TestGangTableShowsNodeRackAndGPUsOfEachPod(t *testing.T) {
	pods := []corev1.Pod{
		*gangPod("team-a", "demo-gang-1-x", "u", "a2-l40s", "demo-gang-1-gpus"),
		*gangPod("team-a", "demo-gang-0-y", "u", "a2-h100", "demo-gang-0-gpus"),
		*gangPod("team-a", "demo-gang-2-z", "u", "a2-h100", "demo-gang-2-gpus"),
	}
	nodes := []corev1.Node{*rackNode("a2-h100", "rack-a2"), *rackNode("a2-l40s", "rack-a2")}
	claims := []resourcev1.ResourceClaim{
		*allocatedClaim("team-a", "demo-gang-0-gpus", "a2-h100", "gpu-0", "gpu-1"),
		*allocatedClaim("team-a", "demo-gang-1-gpus", "a2-l40s", "gpu-6", "gpu-7"),
		*allocatedClaim("team-a", "demo-gang-2-gpus", "a2-h100"),
		*allocatedClaim("team-b", "demo-gang-2-gpus", "b1-v100", "gpu-3"),
	}
	rows := gangRows(pods, nodes, claims)
	var out bytes.Buffer
	WriteGangTable(&out, rows)
	want := [][]string{
		{"POD", "NODE", "RACK", "GPUS"},
		{"team-a/demo-gang-0-y", "a2-h100", "rack-a2", "gpu-0,gpu-1"},
		{"team-a/demo-gang-1-x", "a2-l40s", "rack-a2", "gpu-6,gpu-7"},
		{"team-a/demo-gang-2-z", "a2-h100", "rack-a2"},
	}
	if got := tableColumns(out.String()); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("gang table:\n%s\nwant the columns %v", out.String(), want)
	}
}

// TestGangInOneRack: a gang in one rack passes with that rack; one that spans racks, or runs
// on a node without a rack label, is an error naming the racks and their pods.
func TestGangInOneRack(t *testing.T) {
	rack, err := oneRack([]GangRow{{Pod: "team-a/p0", Node: "a2-h100", Rack: "rack-a2"}, {Pod: "team-a/p1", Node: "a2-l40s", Rack: "rack-a2"}})
	if err != nil || rack != "rack-a2" {
		t.Errorf("one rack: got %q, %v; want rack-a2", rack, err)
	}
	_, err = oneRack([]GangRow{{Pod: "team-a/p0", Node: "a1-h100", Rack: "rack-a1"}, {Pod: "team-a/p1", Node: "a2-h100", Rack: "rack-a2"}, {Pod: "team-a/p2", Node: "a2-l40s", Rack: "rack-a2"}})
	if err == nil || !strings.Contains(err.Error(), "span 2 racks: rack-a1 (team-a/p0); rack-a2 (team-a/p1, team-a/p2)") {
		t.Errorf("two racks: error %v, want the racks and their pods", err)
	}
	_, err = oneRack([]GangRow{{Pod: "team-a/p0", Node: "x", Rack: ""}})
	if err == nil || !strings.Contains(err.Error(), "node x, which has no "+api.LabelRack) {
		t.Errorf("no rack label: error %v", err)
	}
	if _, err := oneRack(nil); err == nil {
		t.Error("no pods: no error")
	}
}

func condition(typ string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg}
}

// TestWorkloadMessages: Kueue's reason for reserving no quota is the message of a
// QuotaReserved=False condition, nothing once quota is reserved; the check's message is the
// one of its own admission check; workloadWaits says which of the two holds a Workload.
func TestWorkloadMessages(t *testing.T) {
	const refused = "couldn't assign flavors to pod set main: insufficient quota for gpudra.dev/gpu-percent in flavor gpu-nodes, previously considered podsets requests (0) + current podset request (4k) > maximum capacity (3200)"
	pending := &kueue.Workload{Status: kueue.WorkloadStatus{Conditions: []metav1.Condition{condition(kueue.WorkloadQuotaReserved, metav1.ConditionFalse, "Pending", refused)}}}
	if msg, ok := quotaRefusal(pending); !ok || msg != refused {
		t.Errorf("QuotaReserved=False: %q, %v; want Kueue's message", msg, ok)
	}
	if got := workloadWaits(pending); got != "Kueue reserved no quota: "+refused {
		t.Errorf("workloadWaits of a pending workload: %q", got)
	}
	if _, ok := quotaRefusal(&kueue.Workload{}); ok {
		t.Error("a workload Kueue has not looked at has a refusal")
	}
	reserved := &kueue.Workload{Status: kueue.WorkloadStatus{
		Conditions: []metav1.Condition{condition(kueue.WorkloadQuotaReserved, metav1.ConditionTrue, "QuotaReserved", "Quota reserved in ClusterQueue team-a")},
		AdmissionChecks: []kueue.AdmissionCheckState{
			{Name: "other", State: kueue.CheckStateReady, Message: "not ours"},
			{Name: demoCheck, State: kueue.CheckStateRetry, Message: "no rack has 8 free GPUs"},
		},
	}}
	if msg, ok := quotaRefusal(reserved); ok {
		t.Errorf("quota reserved, yet refusal %q", msg)
	}
	if state, msg, ok := admissionCheckMessage(reserved, demoCheck); !ok || state != kueue.CheckStateRetry || msg != "no rack has 8 free GPUs" {
		t.Errorf("check message: %q %q %v", state, msg, ok)
	}
	if got := workloadWaits(reserved); got != "admission check gpudra-topology: Retry: no rack has 8 free GPUs" {
		t.Errorf("workloadWaits of a workload the check holds: %q", got)
	}
}

// TestDemoJobsFileAsksWhatTheDemoShows reads deployments/kueue/30-demo-gang.yaml with the
// real API types: demo-gang is an Indexed Job of 4 pods, each with a claim template of 2
// whole GPUs, kept in one rack and gated for gpudra's placement, in team-a's LocalQueue; it
// fits team-a's quota. demo-too-big asks more gpudra.dev/gpu-percent (100 per whole GPU) than
// team-b's ClusterQueue holds with all it may borrow, as 10-queues.yaml says.
func TestDemoJobsFileAsksWhatTheDemoShows(t *testing.T) {
	jobs := map[string]*batchv1.Job{}
	templates := map[string]*resourcev1.ResourceClaimTemplate{}
	for _, doc := range yamlDocs(t, filepath.Join(kueueSamples, DemoJobsFile)) {
		var meta metav1.TypeMeta
		if err := sigsyaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "Job":
			var j batchv1.Job
			if err := sigsyaml.UnmarshalStrict(doc, &j); err != nil {
				t.Fatal(err)
			}
			jobs[j.Name] = &j
		case "ResourceClaimTemplate":
			var c resourcev1.ResourceClaimTemplate
			if err := sigsyaml.UnmarshalStrict(doc, &c); err != nil {
				t.Fatal(err)
			}
			templates[c.Namespace+"/"+c.Name] = &c
		default:
			t.Errorf("%s: unexpected kind %s", DemoJobsFile, meta.Kind)
		}
	}
	// Quota per ClusterQueue, reached from a namespace's LocalQueue.
	localQueues := map[string]string{}
	quota := map[string]int64{}
	for _, doc := range yamlDocs(t, filepath.Join(kueueSamples, "10-queues.yaml")) {
		var meta metav1.TypeMeta
		_ = sigsyaml.Unmarshal(doc, &meta)
		switch meta.Kind {
		case "LocalQueue":
			var lq kueue.LocalQueue
			if err := sigsyaml.UnmarshalStrict(doc, &lq); err != nil {
				t.Fatal(err)
			}
			localQueues[lq.Namespace+"/"+lq.Name] = string(lq.Spec.ClusterQueue)
		case "ClusterQueue":
			var cq kueue.ClusterQueue
			if err := sigsyaml.UnmarshalStrict(doc, &cq); err != nil {
				t.Fatal(err)
			}
			for _, g := range cq.Spec.ResourceGroups {
				for _, f := range g.Flavors {
					for _, r := range f.Resources {
						if r.Name == api.QuotaGPUPercent {
							quota[cq.Name+"/nominal"] += r.NominalQuota.Value()
							if r.BorrowingLimit != nil {
								quota[cq.Name+"/borrowing"] += r.BorrowingLimit.Value()
							}
						}
					}
				}
			}
		}
	}
	// clusterQueue is the ClusterQueue a job is queued in; charged what Kueue charges it in
	// gpudra.dev/gpu-percent, and perPod the whole GPUs of each pod.
	clusterQueue := func(j *batchv1.Job) string {
		q := j.Labels[kueueQueueLabel]
		cq := localQueues[j.Namespace+"/"+q]
		if cq == "" {
			t.Fatalf("job %s: LocalQueue %s/%s is not in 10-queues.yaml", j.Name, j.Namespace, q)
		}
		return cq
	}
	perPod := func(j *batchv1.Job) int64 {
		var gpus int64
		for _, rc := range j.Spec.Template.Spec.ResourceClaims {
			tmpl := templates[j.Namespace+"/"+ptr.Deref(rc.ResourceClaimTemplateName, "")]
			if tmpl == nil {
				t.Fatalf("job %s: claim %s names no template of %s", j.Name, rc.Name, DemoJobsFile)
			}
			for _, r := range tmpl.Spec.Spec.Devices.Requests {
				if r.Exactly == nil || r.Exactly.DeviceClassName != api.DeviceClassGPU {
					t.Fatalf("job %s: template %s asks for %+v, want whole GPUs", j.Name, tmpl.Name, r)
				}
				gpus += r.Exactly.Count
			}
		}
		return gpus
	}
	charged := func(j *batchv1.Job) int64 { return int64(ptr.Deref(j.Spec.Parallelism, 1)) * perPod(j) * 100 }

	gang := jobs[DemoGangJob]
	if gang == nil {
		t.Fatalf("%s has no Job %s", DemoJobsFile, DemoGangJob)
	}
	spec := gang.Spec
	if gang.Namespace != "team-a" || gang.Labels[kueueQueueLabel] != "training" {
		t.Errorf("%s is in %s, queue %q; want team-a's LocalQueue training", gang.Name, gang.Namespace, gang.Labels[kueueQueueLabel])
	}
	if ptr.Deref(spec.Parallelism, 0) != 4 || ptr.Deref(spec.Completions, 0) != 4 || ptr.Deref(spec.CompletionMode, "") != batchv1.IndexedCompletion || !ptr.Deref(spec.Suspend, false) {
		t.Errorf("%s: parallelism %v, completions %v, completionMode %v, suspend %v; want 4, 4, Indexed, true", gang.Name,
			ptr.Deref(spec.Parallelism, 0), ptr.Deref(spec.Completions, 0), ptr.Deref(spec.CompletionMode, ""), ptr.Deref(spec.Suspend, false))
	}
	if got := perPod(gang); got != 2 {
		t.Errorf("%s: each pod asks for %d whole GPUs, want 2", gang.Name, got)
	}
	if got := spec.Template.Annotations[api.AnnotationRequiredTopology]; got != "rack" {
		t.Errorf("%s: %s = %q, want rack", gang.Name, api.AnnotationRequiredTopology, got)
	}
	if g := spec.Template.Spec.SchedulingGates; len(g) != 1 || g[0].Name != api.SchedulingGate {
		t.Errorf("%s: scheduling gates %v, want %s", gang.Name, g, api.SchedulingGate)
	}
	for _, c := range spec.Template.Spec.Containers {
		if len(c.Resources.Claims) != 1 || c.Resources.Claims[0].Name != spec.Template.Spec.ResourceClaims[0].Name {
			t.Errorf("%s: container %s uses claims %v, want the pod's claim", gang.Name, c.Name, c.Resources.Claims)
		}
	}
	if cq := clusterQueue(gang); charged(gang) > quota[cq+"/nominal"] {
		t.Errorf("%s is charged %d %s, more than ClusterQueue %s's nominal quota %d", gang.Name, charged(gang), api.QuotaGPUPercent, cq, quota[cq+"/nominal"])
	}

	big := jobs[DemoTooBigJob]
	if big == nil {
		t.Fatalf("%s has no Job %s", DemoJobsFile, DemoTooBigJob)
	}
	cq := clusterQueue(big)
	if big.Namespace != "team-b" || cq != "team-b" {
		t.Errorf("%s is queued in %s (ClusterQueue %s), want team-b", big.Name, big.Namespace, cq)
	}
	if most := quota[cq+"/nominal"] + quota[cq+"/borrowing"]; most == 0 || charged(big) <= most {
		t.Errorf("%s is charged %d %s; ClusterQueue %s holds at most %d with borrowing: Kueue would admit it", big.Name, charged(big), api.QuotaGPUPercent, cq, most)
	}
	if !ptr.Deref(big.Spec.Suspend, false) {
		t.Errorf("%s is not created suspended", big.Name)
	}
}

// recordingApplier records what the demo applies.
type recordingApplier struct {
	mu      sync.Mutex
	applied []string
}

func (a *recordingApplier) Apply(_ context.Context, objs ...*unstructured.Unstructured) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, o := range objs {
		a.applied = append(a.applied, o.GetKind()+" "+objectName(o))
	}
	return nil
}

// fakeQueueCluster plays Kueue, the gpudra check, the scheduler and kwok for the demo's
// jobs: each new demo-gang Job gets an admitted Workload and 4 running pods on nodes (by
// completion index) with 2 GPUs each; each new demo-too-big Job a Workload Kueue reserved no
// quota for.
type fakeQueueCluster struct {
	cs    kubernetes.Interface
	dyn   *dynamicfake.FakeDynamicClient
	nodes []string
	seen  map[types.UID]bool
	uids  int
}

const tooBigRefusal = "couldn't assign flavors to pod set main: insufficient quota for gpudra.dev/gpu-percent in flavor gpu-nodes, previously considered podsets requests (0) + current podset request (4k) > maximum capacity (3200)"

func newFakeQueueCluster(t *testing.T, nodes ...string) *fakeQueueCluster {
	f := &fakeQueueCluster{nodes: nodes, seen: map[types.UID]bool{}}
	f.cs = fake.NewClientset(rackNode("a1-h100", "rack-a1"), rackNode("a2-h100", "rack-a2"), rackNode("a2-l40s", "rack-a2"))
	f.dyn = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{jobsGVR: "JobList", workloadsGVR: "WorkloadList"})
	// The API server gives every new Job a UID.
	var mu sync.Mutex
	f.dyn.PrependReactor("create", "jobs", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		f.uids++
		a.(k8stesting.CreateAction).GetObject().(*unstructured.Unstructured).SetUID(types.UID(fmt.Sprintf("job-uid-%d", f.uids)))
		return false, nil, nil
	})
	return f
}

func (f *fakeQueueCluster) run(ctx context.Context, t *testing.T) {
	_ = wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for _, ns := range []string{"team-a", "team-b"} {
			jobs, err := f.dyn.Resource(jobsGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				continue
			}
			for _, j := range jobs.Items {
				if f.seen[j.GetUID()] {
					continue
				}
				f.seen[j.GetUID()] = true
				if err := f.admit(ctx, &j); err != nil {
					t.Errorf("fake cluster: %v", err)
				}
			}
		}
		return false, nil
	})
}

func (f *fakeQueueCluster) admit(ctx context.Context, j *unstructured.Unstructured) error {
	wl := &kueue.Workload{
		TypeMeta: metav1.TypeMeta{APIVersion: "kueue.x-k8s.io/v1beta2", Kind: "Workload"},
		ObjectMeta: metav1.ObjectMeta{Namespace: j.GetNamespace(), Name: "job-" + j.GetName() + "-" + string(j.GetUID()),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: j.GetName(), UID: j.GetUID()}}},
	}
	switch j.GetName() {
	case DemoGangJob:
		wl.Status.Conditions = []metav1.Condition{
			condition(kueue.WorkloadQuotaReserved, metav1.ConditionTrue, "QuotaReserved", "Quota reserved in ClusterQueue team-a"),
			condition(kueue.WorkloadAdmitted, metav1.ConditionTrue, "Admitted", "The workload is admitted"),
		}
		wl.Status.AdmissionChecks = []kueue.AdmissionCheckState{{Name: demoCheck, State: kueue.CheckStateReady, Message: "gang fits: main in rack rack-a2; 4 pods placed"}}
		for i, node := range f.nodes {
			name := fmt.Sprintf("%s-%d-%s", j.GetName(), i, j.GetUID())
			claim := name + "-gpus"
			if _, err := f.cs.ResourceV1().ResourceClaims(j.GetNamespace()).Create(ctx, allocatedClaim(j.GetNamespace(), claim, node, fmt.Sprintf("gpu-%d", 2*i), fmt.Sprintf("gpu-%d", 2*i+1)), metav1.CreateOptions{}); err != nil {
				return err
			}
			if _, err := f.cs.CoreV1().Pods(j.GetNamespace()).Create(ctx, gangPod(j.GetNamespace(), name, j.GetUID(), node, claim), metav1.CreateOptions{}); err != nil {
				return err
			}
		}
	case DemoTooBigJob:
		wl.Status.Conditions = []metav1.Condition{condition(kueue.WorkloadQuotaReserved, metav1.ConditionFalse, "Pending", tooBigRefusal)}
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(wl)
	if err != nil {
		return err
	}
	_, err = f.dyn.Resource(workloadsGVR).Namespace(j.GetNamespace()).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
	return err
}

func (f *fakeQueueCluster) pods(t *testing.T, ns string) []string {
	list, err := f.cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	return names
}

// TestDemoQueuesStep runs the demo's queue step against a fake cluster: it applies the
// sample queues and the claim templates, submits both jobs, prints the gang's pods with
// their nodes, racks and GPUs, the check's message and Kueue's reason for the job too big
// for team-b. Run again on the same lab, it replaces the earlier jobs (their pods deleted)
// instead of failing.
func TestDemoQueuesStep(t *testing.T) {
	f := newFakeQueueCluster(t, "a2-h100", "a2-h100", "a2-l40s", "a2-l40s")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go f.run(ctx, t)
	s := &State{Kueue: true, ControllerReplicas: 1}

	var out bytes.Buffer
	ap := &recordingApplier{}
	if err := demoQueuesStep(ctx, &out, f.cs, f.dyn, ap, s, kueueSamples, 10*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"AdmissionCheck gpudra-topology", "ClusterQueue team-a", "ClusterQueue team-b", "LocalQueue team-a/training", "LocalQueue team-b/training", "ResourceClaimTemplate team-a/two-gpus", "ResourceClaimTemplate team-b/eight-gpus"} {
		if !contains(ap.applied, want) {
			t.Errorf("the step did not apply %s (applied %v)", want, ap.applied)
		}
	}
	got := out.String()
	for _, want := range []string{
		"job team-a/demo-gang in LocalQueue training: 4 pods × 2 GPUs (8 GPUs), all in one rack\n",
		"job team-b/demo-too-big in LocalQueue training: 5 pods × 8 GPUs (40 GPUs)\n",
		"clusterqueue team-a: 32 GPUs, and up to 32 more borrowed in cohort gpus\n",
		"clusterqueue team-b: 16 GPUs, and up to 16 more borrowed in cohort gpus\n",
		"gang demo-gang admitted by the gpudra check: gang fits: main in rack rack-a2; 4 pods placed\n",
		"demo-too-big waits: " + tooBigRefusal + "\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if !regexp.MustCompile(`team-a/demo-gang-3-job-uid-\d+\s+a2-l40s\s+rack-a2\s+gpu-6,gpu-7\n`).MatchString(got) {
		t.Errorf("the gang table lacks pod 3 on a2-l40s in rack-a2 with gpu-6,gpu-7:\n%s", got)
	}
	first := f.pods(t, "team-a")

	out.Reset()
	if err := demoQueuesStep(ctx, &out, f.cs, f.dyn, ap, s, kueueSamples, 10*time.Second); err != nil {
		t.Fatalf("second run on the same lab: %v\n%s", err, out.String())
	}
	if n := strings.Count(out.String(), "; the earlier demo's job deleted first\n"); n != 2 {
		t.Errorf("second run: %d jobs replaced, want 2:\n%s", n, out.String())
	}
	now := f.pods(t, "team-a")
	for _, p := range first {
		if contains(now, p) {
			t.Errorf("the first run's pod %s is still there", p)
		}
		if strings.Contains(out.String(), p) {
			t.Errorf("the second run shows the first run's pod %s:\n%s", p, out.String())
		}
	}
	if len(now) != 4 {
		t.Errorf("after the second run team-a has pods %v, want the 4 new ones", now)
	}
}

// TestDemoQueuesStepFailsWhenTheGangSpansRacks: the demo shows the gang's table and then
// fails, naming the racks, rather than presenting a gang across racks as placed in one.
func TestDemoQueuesStepFailsWhenTheGangSpansRacks(t *testing.T) {
	f := newFakeQueueCluster(t, "a1-h100", "a1-h100", "a2-h100", "a2-h100")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go f.run(ctx, t)
	var out bytes.Buffer
	err := demoQueuesStep(ctx, &out, f.cs, f.dyn, &recordingApplier{}, &State{Kueue: true, ControllerReplicas: 1}, kueueSamples, 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "span 2 racks: rack-a1 (") || !strings.Contains(err.Error(), "rack-a2 (") {
		t.Fatalf("error %v, want the two racks named\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "admitted by the gpudra check") {
		t.Errorf("the demo claims the gang was placed:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "POD") {
		t.Errorf("the demo does not show where the pods went:\n%s", out.String())
	}
}

// TestDemoQueuesStepWithoutKueue: on a lab without Kueue the step says so and submits nothing.
func TestDemoQueuesStepWithoutKueue(t *testing.T) {
	f := newFakeQueueCluster(t)
	var out bytes.Buffer
	ap := &recordingApplier{}
	if err := demoQueuesStep(t.Context(), &out, f.cs, f.dyn, ap, &State{}, kueueSamples, time.Second); err != nil {
		t.Fatal(err)
	}
	if want := "\nNo Kueue queues in this demo: the lab runs without Kueue (lab file kueue.enabled: false).\n"; out.String() != want {
		t.Errorf("output %q, want %q", out.String(), want)
	}
	if len(ap.applied) != 0 {
		t.Errorf("applied %v without Kueue", ap.applied)
	}
}

// TestTooBigJobWaitsForKueuesQuotaAnswer: the demo prints only Kueue's answer about GPU
// quota. A Workload held for another reason (its ClusterQueue not active yet) is not that
// answer, and a Workload Kueue reserved quota for fails the demo at once.
func TestTooBigJobWaitsForKueuesQuotaAnswer(t *testing.T) {
	f := newFakeQueueCluster(t)
	wl := func(name string, uid types.UID, c metav1.Condition) {
		w := &kueue.Workload{
			TypeMeta: metav1.TypeMeta{APIVersion: "kueue.x-k8s.io/v1beta2", Kind: "Workload"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: name,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: DemoTooBigJob, UID: uid}}},
			Status: kueue.WorkloadStatus{Conditions: []metav1.Condition{c}},
		}
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(w)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.dyn.Resource(workloadsGVR).Namespace("team-b").Create(t.Context(), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	wl("inactive", "u1", condition(kueue.WorkloadQuotaReserved, metav1.ConditionFalse, "Inadmissible", "ClusterQueue team-b is inactive"))
	_, err := waitQuotaRefused(t.Context(), f.cs, f.dyn, "team-b", "u1", time.Second)
	if err == nil || !strings.Contains(err.Error(), "ClusterQueue team-b is inactive") {
		t.Errorf("an inactive queue: error %v, want a timeout saying what Kueue said", err)
	}
	wl("admitted", "u2", condition(kueue.WorkloadQuotaReserved, metav1.ConditionTrue, "QuotaReserved", "Quota reserved in ClusterQueue team-b"))
	start := time.Now()
	_, err = waitQuotaRefused(t.Context(), f.cs, f.dyn, "team-b", "u2", time.Minute)
	if err == nil || !strings.Contains(err.Error(), "Kueue reserved quota for workload admitted") || time.Since(start) > 10*time.Second {
		t.Errorf("quota reserved: error %v after %s, want an immediate failure", err, time.Since(start))
	}
	wl("refused", "u3", condition(kueue.WorkloadQuotaReserved, metav1.ConditionFalse, "Pending", tooBigRefusal))
	if why, err := waitQuotaRefused(t.Context(), f.cs, f.dyn, "team-b", "u3", time.Minute); err != nil || why != tooBigRefusal {
		t.Errorf("refused for GPU quota: %q, %v", why, err)
	}
	// A Workload whose condition Kueue lost: its Pending warning says why.
	wl("lost", "u4", condition(kueue.WorkloadPodsReady, metav1.ConditionFalse, "WaitForStart", "Not all pods are ready or succeeded"))
	if _, err := f.cs.CoreV1().Events("team-b").Create(t.Context(), &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "lost.1"}, Type: corev1.EventTypeWarning, Reason: "Pending", Message: tooBigRefusal,
		InvolvedObject: corev1.ObjectReference{Kind: "Workload", Namespace: "team-b", Name: "lost"}, LastTimestamp: metav1.Now()}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if why, err := waitQuotaRefused(t.Context(), f.cs, f.dyn, "team-b", "u4", 5*time.Second); err != nil || why != tooBigRefusal {
		t.Errorf("refused for GPU quota, said only in Kueue's event: %q, %v", why, err)
	}
}

package admission

import (
	"bytes"
	"os"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/yaml"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// TestShippedThreeDJob admits the sample users apply (deployments/kueue) as Kueue turns it
// into a Workload: one pod set of 8 pods, one 4-GPU NVLink group each (its claim templates,
// or the extended resource kube-scheduler makes a claim for), pipelines of 4 per rack.
func TestShippedThreeDJob(t *testing.T) {
	data, err := os.ReadFile("../../deployments/kueue/20-train-3d-parallel.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var objs []client.Object
	var job *batchv1.Job
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		switch {
		case bytes.Contains(doc, []byte("kind: ResourceClaimTemplate")):
			tmpl := &resourceapi.ResourceClaimTemplate{}
			err = yaml.UnmarshalStrict(doc, tmpl)
			objs = append(objs, tmpl)
		case bytes.Contains(doc, []byte("kind: Job")):
			job = &batchv1.Job{}
			err = yaml.UnmarshalStrict(doc, job)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if job == nil {
		t.Fatal("the sample has no Job")
	}
	wl := job3D(job)
	r := newReconciler(lab(t, append(objs, wl)...))
	got := reconcile(t, r, wl.Name)
	if got.State != kueue.CheckStateReady {
		t.Fatalf("state %s: %s", got.State, got.Message)
	}
	if groups := plannedDevices(r, wl.UID); len(groups) != 8 || !allNVLinkQuads(groups) {
		t.Errorf("planned devices %v, want eight 4-GPU NVLink groups", groups)
	}
	nodes := strings.Split(got.PodSetUpdates[0].Annotations[api.AnnotationPlacement], ",")
	if len(nodes) != 8 {
		t.Fatalf("placement %v, want 8 nodes", nodes)
	}
	seen := map[string]bool{}
	for _, n := range nodes {
		if seen[n] {
			t.Errorf("two tensor-parallel groups on %s", n)
		}
		seen[n] = true
	}
	for p := range 2 {
		rack := nodes[p*4][:2]
		for _, n := range nodes[p*4 : p*4+4] {
			if n[:2] != rack {
				t.Errorf("pipeline %d spans racks: %v", p, nodes[p*4:p*4+4])
			}
		}
	}
	if got.PodSetUpdates[0].NodeSelector[api.LabelBlock] != "b1" {
		t.Errorf("node selector %v, want the block", got.PodSetUpdates[0].NodeSelector)
	}
}

// TestShippedOneGPUPodsJob admits the sample of 32 one-GPU pods on a block whose rack r1 is
// behind one ToR oversubscribed 3:1 and rack r2 behind two non-blocking ToRs: tensor-parallel
// groups share a host, the first pipeline stays under the oversubscribed ToR, the second
// spans rack r2's ToRs, and the message says so.
func TestShippedOneGPUPodsJob(t *testing.T) {
	data, err := os.ReadFile("../../deployments/kueue/25-train-3d-one-gpu-pods.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var job batchv1.Job
	tmpl := &resourceapi.ResourceClaimTemplate{}
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		switch {
		case bytes.Contains(doc, []byte("kind: Job")):
			err = yaml.UnmarshalStrict(doc, &job)
		case bytes.Contains(doc, []byte("kind: ResourceClaimTemplate")):
			err = yaml.UnmarshalStrict(doc, tmpl)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if job.Spec.Parallelism == nil || tmpl.Name == "" {
		t.Fatal("the sample has no Job or no ResourceClaimTemplate")
	}
	wl := job3D(&job)
	got := reconcile(t, newReconciler(torLab(t, "", wl, tmpl)), wl.Name)
	if got.State != kueue.CheckStateReady {
		t.Fatalf("state %s: %s", got.State, got.Message)
	}
	nodes := strings.Split(got.PodSetUpdates[0].Annotations[api.AnnotationPlacement], ",")
	if len(nodes) != 32 {
		t.Fatalf("placement %v, want 32 nodes", nodes)
	}
	for pod, n := range nodes {
		if first := nodes[pod/4*4]; n != first {
			t.Errorf("pod %d on %s, its tensor-parallel group's first pod on %s", pod, n, first)
		}
		if rack := []string{"r1", "r2"}[pod/16]; !strings.HasPrefix(n, rack) {
			t.Errorf("pod %d of pipeline %d on %s, want rack %s", pod, pod/16, n, rack)
		}
	}
	for _, want := range []string{"required: b1/r1/tor-a uplinks oversubscribed 3:1", "slice 1 spans b1/r2/tor-b1, b1/r2/tor-b2"} {
		if !strings.Contains(got.Message, want) {
			t.Errorf("message %q does not say %q", got.Message, want)
		}
	}
}

// job3D is the Workload Kueue creates for a Job: one pod set "main" of parallelism pods.
func job3D(job *batchv1.Job) *kueue.Workload {
	wl := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: "job-" + job.Name, UID: types.UID(job.Name)}}
	wl.Spec.PodSets = []kueue.PodSet{{Name: "main", Count: *job.Spec.Parallelism, Template: job.Spec.Template}}
	wl.Status.Conditions = []metav1.Condition{{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionTrue, Reason: "QuotaReserved", LastTransitionTime: metav1.Now()}}
	wl.Status.AdmissionChecks = []kueue.AdmissionCheckState{{Name: "gpudra-topology", State: kueue.CheckStatePending}}
	return wl
}

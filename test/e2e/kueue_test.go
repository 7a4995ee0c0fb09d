//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpudra/gpudra/lab"
)

var (
	jobsGVR      = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
	workloadsGVR = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}
)

// TestKueueAdmitsGPUJobsWithinQuota gives a LocalQueue a quota of 2 GPUs (counted by Kueue
// from the Job's ResourceClaimTemplate through the lab's deviceClassMappings). A Job of two
// 1-GPU workers is suspended by Kueue's webhook, admitted and runs; a second one waits,
// suspended, until the first is deleted.
func TestKueueAdmitsGPUJobsWithinQuota(t *testing.T) {
	inLane(t, clusterLane)
	if !state.Kueue {
		labLacks(t, "Kueue (lab file kueue.enabled: false)")
	}
	const queue = "e2e-gpus"
	applyForTest(t, decode(t, clusterQueue(queue, false, 8, 2))...)
	ns := namespace(t, "e2e-kueue")
	apply(t, `
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team-a, namespace: `+ns+`}
spec: {clusterQueue: `+queue+`}
`+oneGPUTemplate(ns))

	first := createQueuedJob(t, ns, "first", "team-a")
	if !suspended(first) {
		t.Fatal("Kueue's webhook did not suspend a new Job of its LocalQueue")
	}
	eventually(t, 2*time.Minute, "Kueue admits the first Job and both workers run", jobRuns(ns, "first", 2))
	createQueuedJob(t, ns, "second", "team-a")
	eventually(t, time.Minute, "the second Job's workload waits for quota", waitsOnQuota(ns, "second"))
	if j, err := dyn().Resource(jobsGVR).Namespace(ns).Get(t.Context(), "second", metav1.GetOptions{}); err != nil || !suspended(j) {
		t.Fatalf("the second Job is not held suspended while the quota is used (err %v)", err)
	}

	deleteJobNow(t, ns, "first")
	eventually(t, 2*time.Minute, "the second Job is admitted and runs once the first is gone", jobRuns(ns, "second", 2))
}

// oneGPUTemplate is the claim template createQueuedJob's workers use: one whole GPU, which
// Kueue counts as 100 gpudra.dev/gpu-percent. It starts a new YAML document.
func oneGPUTemplate(ns string) string {
	return `
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu, namespace: ` + ns + `}
spec:
  spec:
    devices:
      requests:
      - {name: gpu, exactly: {deviceClassName: gpu.gpudra.dev}}
`
}

func createQueuedJob(t *testing.T, ns, name, queue string) *unstructured.Unstructured {
	t.Helper()
	objs, err := lab.DecodeManifests([]byte(`
apiVersion: batch/v1
kind: Job
metadata:
  name: ` + name + `
  namespace: ` + ns + `
  labels: {kueue.x-k8s.io/queue-name: ` + queue + `}
spec:
  parallelism: 2
  completions: 2
  template:
    spec:
      restartPolicy: Never
      resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
      containers:
      - name: worker
        image: registry.k8s.io/pause:3.10
        resources:
          requests: {cpu: 100m}
          claims: [{name: gpu}]
`))
	if err != nil {
		t.Fatal(err)
	}
	created, err := dyn().Resource(jobsGVR).Namespace(ns).Create(t.Context(), objs[0], metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Job %s: %v", name, err)
	}
	return created
}

func suspended(job *unstructured.Unstructured) bool {
	s, _, _ := unstructured.NestedBool(job.Object, "spec", "suspend")
	return s
}

func jobRuns(ns, name string, workers int) func(context.Context) error {
	return func(ctx context.Context) error {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + name})
		if err != nil {
			return err
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				running++
			}
		}
		if running != workers {
			return fmt.Errorf("job %s: %d of %d workers run", name, running, workers)
		}
		return nil
	}
}

// TestQueueWithoutGPUQuotaSaysSo: a GPU Job sent to a queue whose ClusterQueue has no
// GPU quota (gpudra.dev/gpu-percent) stays suspended, and its Workload names the missing resource.
func TestQueueWithoutGPUQuotaSaysSo(t *testing.T) {
	inLane(t, clusterLane)
	if !state.Kueue {
		labLacks(t, "Kueue (lab file kueue.enabled: false)")
	}
	applyForTest(t, decode(t, `apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: e2e-cpu-only}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: e2e-cpu-only}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: e2e-cpu-only
      resources:
      - {name: cpu, nominalQuota: "8"}
`)...)
	ns := namespace(t, "e2e-no-gpu-quota")
	apply(t, `
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: cpu-only, namespace: `+ns+`}
spec: {clusterQueue: e2e-cpu-only}
`+oneGPUTemplate(ns))
	createQueuedJob(t, ns, "wants-gpus", "cpu-only")
	eventually(t, time.Minute, "the Workload says the queue has no gpudra.dev/gpu-percent quota", workloadSays(ns, "wants-gpus", "resource gpudra.dev/gpu-percent unavailable in ClusterQueue"))
	if j, err := dyn().Resource(jobsGVR).Namespace(ns).Get(t.Context(), "wants-gpus", metav1.GetOptions{}); err != nil || !suspended(j) {
		t.Fatalf("the Job is not held suspended (err %v)", err)
	}
}

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpudra/gpudra/test/lab"
)

// TestHigherPriorityPreemptsAWholeGang: a low-priority gang holds the training block's 32
// GPUs; a high-priority gang of 16 GPUs on the same ClusterQueue (gpudra check on) makes Kueue
// preempt the low one as a whole — none of its pods keeps running — and then runs.
func TestHigherPriorityPreemptsAWholeGang(t *testing.T) {
	if !state.Kueue {
		t.Skip("this lab runs without Kueue")
	}
	if nodesWithProfile("hgx-h100-4gpu") < 8 {
		t.Skip("the lab has no training block (deployments/lab/e2e.yaml)")
	}
	const queue = "e2e-prio"
	ap, err := lab.NewApplier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := lab.DecodeManifests([]byte(clusterQueue(queue, true, 64, 32) + `---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: e2e-research}
value: 100
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: e2e-production}
value: 1000
`))
	if err != nil {
		t.Fatal(err)
	}
	// Preempt lower priority inside the queue.
	for _, o := range objs {
		if o.GetKind() == "ClusterQueue" {
			o.Object["spec"].(map[string]any)["preemption"] = map[string]any{"withinClusterQueue": "LowerPriority"}
		}
	}
	t.Cleanup(func() { _ = ap.Delete(context.Background(), objs...) })
	if err := ap.Apply(t.Context(), objs...); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t, "e2e-prio")
	apply(t, `
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: train, namespace: `+ns+`}
spec: {clusterQueue: `+queue+`}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: four-gpus, namespace: `+ns+`}
spec:
  spec:
    devices:
      requests:
      - {name: tp, exactly: {deviceClassName: gpu.gpudra.dev, count: 4}}
`)
	job := func(name, priority string, pods int) string {
		return fmt.Sprintf(`
apiVersion: batch/v1
kind: Job
metadata:
  name: %s
  namespace: %s
  labels: {kueue.x-k8s.io/queue-name: train, kueue.x-k8s.io/priority-class: %s}
spec:
  parallelism: %d
  completions: %d
  completionMode: Indexed
  template:
    metadata:
      annotations: {gpudra.dev/required-topology: block}
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 0
      schedulingGates: [{name: gpudra.dev/placement}]
      nodeSelector: {%s: hgx-h100-4gpu}
      resourceClaims: [{name: tp, resourceClaimTemplateName: four-gpus}]
      containers:
      - name: worker
        image: registry.k8s.io/pause:3.10
        resources:
          requests: {cpu: "1"}
          claims: [{name: tp}]
`, name, ns, priority, pods, pods, lab.LabelProfile)
	}
	apply(t, job("research", "e2e-research", 8))
	eventually(t, 3*time.Minute, "the research gang holds all 32 GPUs", jobRuns(ns, "research", 8))
	apply(t, job("production", "e2e-production", 4))
	eventually(t, 4*time.Minute, "the production gang preempts it and runs", jobRuns(ns, "production", 4))
	eventually(t, 2*time.Minute, "no pod of the preempted gang runs", func(ctx context.Context) error {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=research"})
		if err != nil {
			return err
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				running++
			}
		}
		if running > 0 {
			return fmt.Errorf("%d of the research gang's pods still run", running)
		}
		return nil
	})
	eventually(t, time.Minute, "the research workload was evicted as a whole", workloadSays(ns, "research", "Preempted"))
}

//go:build e2e

package e2e

import (
	"testing"
	"time"
)

// TestHigherPriorityPreemptsAWholeGang: a low-priority gang holds the training block's 32
// GPUs; a high-priority gang of 16 GPUs on the same ClusterQueue (gpudra check on) makes Kueue
// preempt the low one as a whole — none of its pods keeps running — and then runs.
func TestHigherPriorityPreemptsAWholeGang(t *testing.T) {
	inLane(t, clusterLane)
	requireTrainingBlock(t)
	const queue = "e2e-prio"
	objs := decode(t, clusterQueue(queue, true, 64, 32)+`---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: e2e-research}
value: 100
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: e2e-production}
value: 1000
`)
	// Preempt lower priority inside the queue.
	for _, o := range objs {
		if o.GetKind() == "ClusterQueue" {
			o.Object["spec"].(map[string]any)["preemption"] = map[string]any{"withinClusterQueue": "LowerPriority"}
		}
	}
	applyForTest(t, objs...)
	ns := namespace(t, "e2e-prio")
	apply(t, `
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: train, namespace: `+ns+`}
spec: {clusterQueue: `+queue+`}
`+fourGPUTemplate("four-gpus", ns))
	job := func(name, priority string, pods int) string {
		return gatedGang(name, ns, "train", "four-gpus", pods, "kueue.x-k8s.io/priority-class: "+priority)
	}
	apply(t, job("research", "e2e-research", 8))
	eventually(t, 3*time.Minute, "the research gang holds all 32 GPUs", jobRuns(ns, "research", 8))
	apply(t, job("production", "e2e-production", 4))
	eventually(t, 4*time.Minute, "the production gang preempts it and runs", jobRuns(ns, "production", 4))
	eventually(t, 2*time.Minute, "no pod of the preempted gang runs", noPodRuns(ns, "research"))
	eventually(t, time.Minute, "the research workload was evicted as a whole", workloadSays(ns, "research", "Preempted"))
}

//go:build e2e

package e2e

import (
	"testing"
	"time"
)

// TestBorrowedGPUsAreReclaimed: two teams share a cohort with 16 GPUs each. Team A's gang of
// 32 GPUs runs by borrowing team B's idle quota; when team B submits a 16-GPU gang, Kueue
// reclaims B's nominal quota by preempting A's gang as a whole, and B's gang runs. Kueue runs
// with fair sharing on: a queue within its nominal quota reclaims it whatever the two queues'
// shares (B, with nothing borrowed, has share 0 either way), so the weights do not matter here.
func TestBorrowedGPUsAreReclaimed(t *testing.T) {
	inLane(t, clusterLane)
	requireTrainingBlock(t)
	objs := decode(t, clusterQueue("e2e-team-a", true, 64, 16)+"---\n"+clusterQueue("e2e-team-b", true, 64, 16))
	// Borrowing is per flavor: both teams' quota must be of one flavor (team A's).
	shared := objs[:0]
	for _, o := range objs {
		switch {
		case o.GetKind() == "ResourceFlavor" && o.GetName() == "e2e-team-b":
			continue
		case o.GetKind() == "ClusterQueue":
			spec := o.Object["spec"].(map[string]any)
			spec["cohortName"] = "e2e-gpus"
			spec["preemption"] = map[string]any{"reclaimWithinCohort": "Any"}
			groups := spec["resourceGroups"].([]any)
			groups[0].(map[string]any)["flavors"].([]any)[0].(map[string]any)["name"] = "e2e-team-a"
		}
		shared = append(shared, o)
	}
	applyForTest(t, shared...)
	ns := namespace(t, "e2e-cohort")
	apply(t, `
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team-a, namespace: `+ns+`}
spec: {clusterQueue: e2e-team-a}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team-b, namespace: `+ns+`}
spec: {clusterQueue: e2e-team-b}
`+fourGPUTemplate("four-gpus", ns))
	job := func(name, queue string, pods int) string { return gatedGang(name, ns, queue, "four-gpus", pods, "") }
	apply(t, job("team-a-big", "team-a", 8))
	eventually(t, 3*time.Minute, "team A's 32-GPU gang runs on borrowed quota", jobRuns(ns, "team-a-big", 8))
	apply(t, job("team-b", "team-b", 4))
	eventually(t, 4*time.Minute, "team B gets its nominal 16 GPUs back and runs", jobRuns(ns, "team-b", 4))
	eventually(t, 2*time.Minute, "team A's gang was preempted whole, not halved", noPodRuns(ns, "team-a-big"))
}

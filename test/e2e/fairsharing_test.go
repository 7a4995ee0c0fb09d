//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/lab"
)

// The cohort of TestFairSharingSplitsByWeight: 9 GPUs, 6 held by the Cohort itself and 3 as
// team C's nominal quota. Teams A (weight 2) and B (weight 1) have no nominal quota, so all
// they run is borrowed and Kueue's share of each is its GPUs over the cohort's 9, divided by
// its weight.
const (
	fairCohort      = "e2e-fair"
	fairCohortGPUs  = 6
	fairTeamCGPUs   = 3
	fairBacklogJobs = 9
)

// TestFairSharingSplitsByWeight: two teams of one cohort, weights 2 and 1, each with a backlog
// of one-GPU Jobs that would fill the cohort alone, end up with the cohort's 9 GPUs split 6:3
// (within one job); then team C, idle until then, submits 3 Jobs and takes its nominal 3 GPUs
// back by preempting borrowed ones, and A and B split the 6 left 4:2 (within one job).
func TestFairSharingSplitsByWeight(t *testing.T) {
	inLane(t, clusterLane)
	requireTrainingBlock(t)
	applyForTest(t, decode(t, fairSharingQueues())...)
	ns := namespace(t, "e2e-fair")
	apply(t, `
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team-a, namespace: `+ns+`}
spec: {clusterQueue: e2e-fair-a}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team-b, namespace: `+ns+`}
spec: {clusterQueue: e2e-fair-b}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team-c, namespace: `+ns+`}
spec: {clusterQueue: e2e-fair-c}
`+oneGPUTemplate(ns))

	var backlog strings.Builder
	for i := range fairBacklogJobs {
		backlog.WriteString(fairJob(ns, fmt.Sprintf("a-%d", i), "team-a"))
		backlog.WriteString(fairJob(ns, fmt.Sprintf("b-%d", i), "team-b"))
	}
	apply(t, backlog.String())
	total := fairCohortGPUs + fairTeamCGPUs
	settles(t, 4*time.Minute, "teams A and B, weights 2:1, split the cohort's 9 GPUs 6:3 within one job",
		fairSplit(ns, map[string][2]int{"a": {5, 7}, "b": {2, 4}, "c": {0, 0}}, total))
	before := preemptedWorkloads(t, ns)

	var c strings.Builder
	for i := range fairTeamCGPUs {
		c.WriteString(fairJob(ns, fmt.Sprintf("c-%d", i), "team-c"))
	}
	apply(t, c.String())
	settles(t, 4*time.Minute, "team C takes its 3 GPUs back and A and B split the 6 left 4:2 within one job",
		fairSplit(ns, map[string][2]int{"a": {3, 5}, "b": {1, 3}, "c": {3, 3}}, total))
	after := preemptedWorkloads(t, ns)
	if after["c"] != 0 {
		t.Errorf("team C, within its nominal quota, had %d Jobs preempted", after["c"])
	}
	if after["a"]+after["b"] <= before["a"]+before["b"] {
		t.Errorf("team C ran without preempting: A and B had %v preemptions before it submitted, %v after", before, after)
	}
}

// fairSharingQueues: a flavor, the Cohort e2e-fair holding 6 GPUs and the ClusterQueues of
// teams A (weight 2), B (weight 1) and C (weight 1, nominal 3 GPUs), without the gpudra check
// (one-GPU Jobs need no placement), each reclaiming from any borrowing queue of the cohort.
// The Cohort comes last, so that it is deleted after its ClusterQueues.
func fairSharingQueues() string {
	cq := func(team, weight string, gpus int) string {
		return fmt.Sprintf(`---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: e2e-fair-%s}
spec:
  cohortName: %s
  fairSharing: {weight: "%s"}
  namespaceSelector: {}
  preemption: {reclaimWithinCohort: Any}
  resourceGroups:
  - coveredResources: [cpu, gpudra.dev/gpu-percent]
    flavors:
    - name: %s
      resources:
      - {name: cpu, nominalQuota: "4"}
      - {name: gpudra.dev/gpu-percent, nominalQuota: "%d"}
`, team, fairCohort, weight, fairCohort, 100*gpus)
	}
	return `apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: ` + fairCohort + `}
` + cq("a", "2", 0) + cq("b", "1", 0) + cq("c", "1", fairTeamCGPUs) + fmt.Sprintf(`---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: %s}
spec:
  resourceGroups:
  - coveredResources: [cpu, gpudra.dev/gpu-percent]
    flavors:
    - name: %s
      resources:
      - {name: cpu, nominalQuota: "0"}
      - {name: gpudra.dev/gpu-percent, nominalQuota: "%d"}
`, fairCohort, fairCohort, 100*fairCohortGPUs)
}

// fairJob is a Job of one pod with one whole GPU (oneGPUTemplate) on the training block's
// simulated nodes, which stops at once when Kueue preempts it.
func fairJob(ns, name, queue string) string {
	return fmt.Sprintf(`
---
apiVersion: batch/v1
kind: Job
metadata:
  name: %s
  namespace: %s
  labels: {kueue.x-k8s.io/queue-name: %s}
spec:
  parallelism: 1
  completions: 1
  template:
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 0
      nodeSelector: {%s: hgx-a100-4gpu}
      resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
      containers:
      - name: worker
        image: registry.k8s.io/pause:3.10
        resources:
          requests: {cpu: 100m}
          claims: [{name: gpu}]
`, name, ns, queue, lab.LabelProfile)
}

// fairSplit is a condition: each team (the prefix of its Jobs' names) runs a number of
// one-GPU pods within its range, all of them total, and each team's ClusterQueue has exactly
// that many GPUs admitted, so the split is Kueue's and not pods still stopping.
func fairSplit(ns string, want map[string][2]int, total int) func(context.Context) error {
	return func(ctx context.Context) error {
		running, err := runningByTeam(ctx, ns)
		if err != nil {
			return err
		}
		var shares, wrong []string
		sum := 0
		for _, team := range slices.Sorted(maps.Keys(want)) {
			gpus, share, err := fairQueueUsage(ctx, "e2e-fair-"+team)
			if err != nil {
				return err
			}
			n, r := running[team], want[team]
			shares = append(shares, fmt.Sprintf("%s: %d pods, %d GPUs admitted, weighted share %d", team, n, gpus, share))
			if n < r[0] || n > r[1] || gpus != n {
				wrong = append(wrong, fmt.Sprintf("team %s runs %d one-GPU pods with %d GPUs admitted, want %d to %d", team, n, gpus, r[0], r[1]))
			}
			sum += n
		}
		if len(wrong) > 0 {
			return fmt.Errorf("%s (%s)", strings.Join(wrong, "; "), strings.Join(shares, "; "))
		}
		if sum != total {
			return fmt.Errorf("%d one-GPU pods run, want the cohort's %d (%s)", sum, total, strings.Join(shares, "; "))
		}
		return nil
	}
}

// runningByTeam counts the running pods of each team's Jobs, by the Job name's prefix.
func runningByTeam(ctx context.Context, ns string) (map[string]int, error) {
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	n := map[string]int{}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		team, _, _ := strings.Cut(p.Labels["job-name"], "-")
		n[team]++
	}
	return n, nil
}

// fairQueueUsage is the GPUs a ClusterQueue has admitted and its weighted share, as Kueue
// reports them.
func fairQueueUsage(ctx context.Context, name string) (gpus int, share int64, err error) {
	u, err := dyn().Resource(clusterQueuesGVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return 0, 0, err
	}
	var cq kueue.ClusterQueue
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &cq); err != nil {
		return 0, 0, err
	}
	for _, f := range cq.Status.FlavorsUsage {
		for _, r := range f.Resources {
			if r.Name == "gpudra.dev/gpu-percent" {
				gpus += int(r.Total.Value() / 100)
			}
		}
	}
	if cq.Status.FairSharing != nil {
		share = cq.Status.FairSharing.WeightedShare
	}
	return gpus, share, nil
}

// preemptedWorkloads counts, per team, the preemptions its Workloads have recorded.
func preemptedWorkloads(t *testing.T, ns string) map[string]int {
	t.Helper()
	list, err := dyn().Resource(workloadsGVR).Namespace(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, u := range list.Items {
		var wl kueue.Workload
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &wl); err != nil {
			t.Fatal(err)
		}
		team := ""
		for _, o := range wl.OwnerReferences {
			if o.Kind == "Job" {
				team, _, _ = strings.Cut(o.Name, "-")
			}
		}
		if wl.Status.SchedulingStats == nil {
			continue
		}
		for _, e := range wl.Status.SchedulingStats.Evictions {
			if e.Reason == kueue.WorkloadEvictedByPreemption {
				n[team] += int(e.Count)
				t.Logf("workload %s (team %s) preempted %d times (%s)", wl.Name, team, e.Count, e.UnderlyingCause)
			}
		}
	}
	return n
}

// settles waits until cond holds and checks that it still holds 10 seconds later, so that a
// split passed through on the way is not taken for the one Kueue keeps.
func settles(t *testing.T, timeout time.Duration, what string, cond func(context.Context) error) {
	t.Helper()
	eventually(t, timeout, what, cond)
	time.Sleep(10 * time.Second)
	if err := cond(t.Context()); err != nil {
		t.Fatalf("%s: held, then not 10 s later: %v", what, err)
	}
}

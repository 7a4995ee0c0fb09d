//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/lab"
)

// Pod priority through Kueue: a Job without the kueue.x-k8s.io/priority-class label whose
// pods name a PriorityClass gets that class's value as its Workload's priority, which Kueue
// orders its ClusterQueue by and preemption compares.

// podPriorityLab is a ClusterQueue of 2 GPUs that preempts lower priority within itself
// (held with stopPolicy Hold when hold), a namespace with a LocalQueue on it and the template
// one-gpu, and two PriorityClasses, <name>-low (100) and <name>-high (1000), with the default
// preemptionPolicy.
func podPriorityLab(t *testing.T, name string, hold bool) (ns, low, high string) {
	t.Helper()
	if !state.Kueue {
		labLacks(t, "Kueue (lab file kueue.enabled: false)")
	}
	queue := "e2e-" + name
	low, high = queue+"-low", queue+"-high"
	objs := decode(t, clusterQueue(queue, false, 8, 2)+`---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: `+low+`}
value: 100
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: `+high+`}
value: 1000
`)
	for _, o := range objs {
		if o.GetKind() == "ClusterQueue" {
			spec := o.Object["spec"].(map[string]any)
			spec["preemption"] = map[string]any{"withinClusterQueue": "LowerPriority"}
			if hold {
				spec["stopPolicy"] = "Hold"
			}
		}
	}
	applyForTest(t, objs...)
	ns = namespace(t, queue)
	apply(t, teamQueue(ns, queue)+oneGPUTemplate(ns))
	return ns, low, high
}

// priorityJob is a Job of two pods of one GPU each (the whole ClusterQueue of
// podPriorityLab) whose pods carry priorityClassName and stop at once when preempted; the
// Job has no kueue.x-k8s.io/priority-class label.
func priorityJob(ns, name, class string) string {
	return fmt.Sprintf(`
apiVersion: batch/v1
kind: Job
metadata:
  name: %s
  namespace: %s
  labels: {kueue.x-k8s.io/queue-name: team}
spec:
  parallelism: 2
  completions: 2
  template:
    spec:
      priorityClassName: %s
      restartPolicy: Never
      terminationGracePeriodSeconds: 0
      resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
      containers:
      - name: worker
        image: registry.k8s.io/pause:3.10
        resources:
          requests: {cpu: 100m}
          claims: [{name: gpu}]
`, name, ns, class)
}

// priorityFromClass: the Job's Workload has the priority value of PriorityClass class,
// taken from its pods.
func priorityFromClass(ns, job, class string, value int32) func(context.Context) error {
	return func(ctx context.Context) error {
		wl, err := workloadOfJob(ctx, ns, job)
		if err != nil {
			return err
		}
		ref := wl.Spec.PriorityClassRef
		if wl.Spec.Priority == nil || *wl.Spec.Priority != value || ref == nil || ref.Kind != kueue.PodPriorityClassKind || ref.Name != class {
			return fmt.Errorf("workload %s: priority %v from %+v, want %d from PriorityClass %s", wl.Name, wl.Spec.Priority, ref, value, class)
		}
		return nil
	}
}

// workloadHas: the Job's Workload has condition typ with status True, and reason when given.
func workloadHas(ns, job, typ, reason string) func(context.Context) error {
	return func(ctx context.Context) error {
		wl, err := workloadOfJob(ctx, ns, job)
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(wl.Status.Conditions, typ)
		if c == nil || c.Status != metav1.ConditionTrue || (reason != "" && c.Reason != reason) {
			return fmt.Errorf("workload %s: condition %s is %+v, want True (reason %q)", wl.Name, typ, c, reason)
		}
		return nil
	}
}

// jobSuspended: the Job's spec.suspend is want.
func jobSuspended(ns, job string, want bool) func(context.Context) error {
	return func(ctx context.Context) error {
		j, err := client.BatchV1().Jobs(ns).Get(ctx, job, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := j.Spec.Suspend != nil && *j.Spec.Suspend; got != want {
			return fmt.Errorf("job %s: suspend is %v, want %v", job, got, want)
		}
		return nil
	}
}

// neverAdmitted fails the test if the Job's Workload holds or ever held quota: it has an
// admission, a QuotaReserved condition True or an eviction.
func neverAdmitted(t *testing.T, ns, job string) {
	t.Helper()
	wl, err := workloadOfJob(t.Context(), ns, job)
	if err != nil {
		t.Fatal(err)
	}
	evicted := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadEvicted)
	if wl.Status.Admission != nil || meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved) || evicted != nil ||
		(wl.Status.SchedulingStats != nil && len(wl.Status.SchedulingStats.Evictions) > 0) {
		t.Errorf("workload %s of job %s was admitted before the higher-priority one: admission %+v, conditions %+v", wl.Name, job, wl.Status.Admission, wl.Status.Conditions)
	}
}

// TestPodPriorityOrdersTheQueue: in a held ClusterQueue, a Job whose pods are of a low
// PriorityClass is submitted, then one of a high class, each wanting the queue's 2 GPUs.
// Kueue gives each Workload its pods' class's priority (and gpudra explain says so); once
// the queue is released the high one is admitted and runs first although submitted later,
// and the low one waits, suspended, never admitted.
func TestPodPriorityOrdersTheQueue(t *testing.T) {
	inLane(t, clusterLane)
	ns, low, high := podPriorityLab(t, "pod-prio-order", true)
	apply(t, priorityJob(ns, "low-first", low))
	eventually(t, time.Minute, "the low Job's Workload has its pods' priority", priorityFromClass(ns, "low-first", low, 100))
	// Kueue orders equal priorities by creation time, at one-second resolution: the low
	// Workload is strictly the older one.
	time.Sleep(1100 * time.Millisecond)
	apply(t, priorityJob(ns, "high-second", high))
	eventually(t, time.Minute, "the high Job's Workload has its pods' priority", priorityFromClass(ns, "high-second", high, 1000))
	for _, job := range []string{"low-first", "high-second"} {
		if err := jobSuspended(ns, job, true)(t.Context()); err != nil {
			t.Fatalf("while the ClusterQueue is held: %v", err)
		}
	}

	out, err := exec.CommandContext(t.Context(), gpudraCLI, "explain", "job/high-second", "-n", ns, "--kubeconfig", lab.Layout{Root: state.Dir}.Kubeconfig()).CombinedOutput()
	if err != nil {
		t.Fatalf("gpudra explain: %v\n%s", err, out)
	}
	if want := "priority: 1000 (PriorityClass " + high + ")"; !strings.Contains(string(out), want) {
		t.Errorf("explain output lacks %q:\n%s", want, out)
	}

	release(t, "e2e-pod-prio-order", 2)
	eventually(t, 2*time.Minute, "the high Job, submitted second, is admitted", workloadHas(ns, "high-second", kueue.WorkloadAdmitted, ""))
	eventually(t, 2*time.Minute, "the high Job runs", jobRuns(ns, "high-second", 2))
	neverAdmitted(t, ns, "low-first")
	if err := jobSuspended(ns, "low-first", true)(t.Context()); err != nil {
		t.Errorf("while the high Job holds the quota: %v", err)
	}
}

// TestPodPriorityPreempts: a running Job whose pods are of a low PriorityClass holds the
// ClusterQueue's 2 GPUs; a Job of a high class arrives and Kueue preempts the low one
// (its Workload Evicted for Preempted, Preempted InClusterQueue; the Job suspended, its
// pods gone), and the high one runs.
func TestPodPriorityPreempts(t *testing.T) {
	inLane(t, clusterLane)
	ns, low, high := podPriorityLab(t, "pod-prio-preempt", false)
	apply(t, priorityJob(ns, "low", low))
	eventually(t, 2*time.Minute, "the low Job holds the queue's 2 GPUs and runs", jobRuns(ns, "low", 2))

	apply(t, priorityJob(ns, "high", high))
	eventually(t, 2*time.Minute, "the low Job's Workload is evicted by preemption",
		workloadHas(ns, "low", kueue.WorkloadEvicted, kueue.WorkloadEvictedByPreemption))
	eventually(t, time.Minute, "the low Job's Workload says it was preempted within its ClusterQueue",
		workloadHas(ns, "low", kueue.WorkloadPreempted, kueue.InClusterQueueReason))
	eventually(t, time.Minute, "the low Job is suspended", jobSuspended(ns, "low", true))
	eventually(t, 2*time.Minute, "no pod of the low Job runs", noPodRuns(ns, "low"))
	eventually(t, 2*time.Minute, "the high Job runs", jobRuns(ns, "high", 2))
	if err := jobSuspended(ns, "high", false)(t.Context()); err != nil {
		t.Error(err)
	}
	if err := priorityFromClass(ns, "high", high, 1000)(t.Context()); err != nil {
		t.Error(err)
	}
}

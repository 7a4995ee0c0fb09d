//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/lab"
	"github.com/gpudra/gpudra/queueing/largefirst"
)

// The queue of the large-jobs-first tests: exactly the 32 GPUs of the training block, so
// that the 32-GPU gang fits only in an empty queue.
const (
	largeFirstGPUs      = 32
	largeFirstSmallJobs = 12
	// largeFirstEqual is the one priority class every job carries with the policy off.
	largeFirstEqual = "e2e-large-first-equal"
)

// TestLargeJobsFirstAdmitsTheGangFirst: a 32-GPU gang submitted after 12 one-GPU jobs, to a
// queue of 32 GPUs held (stopPolicy Hold) while they are submitted, is admitted first once
// the queue is released: the webhook gave it the band gpudra-large and the small jobs
// none, so ordering, not arrival, decides. The small jobs wait, as the gang fills the queue.
func TestLargeJobsFirstAdmitsTheGangFirst(t *testing.T) {
	inLane(t, clusterLane)
	ns, cq := largeFirstLab(t, "e2e-large-first-on")
	submitLargeFirstBacklog(t, ns, "")
	eventually(t, time.Minute, "the webhook gave the gang its band and recorded every job's demand", func(ctx context.Context) error {
		if err := jobLabelled(ctx, ns, "gang", "gpudra-large", "32"); err != nil {
			return err
		}
		return jobLabelled(ctx, ns, "small-0", "", "1")
	})
	release(t, cq, largeFirstSmallJobs+1)
	eventually(t, 2*time.Minute, "the gang is admitted", quotaReserved(ns, "gang", true))
	admitted, err := admittedSmallJobs(t.Context(), ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(admitted) > 0 {
		t.Errorf("small jobs %v were admitted beside the 32-GPU gang in a queue of 32 GPUs", admitted)
	}
}

// TestLargeJobsFirstOffKeepsArrivalOrder: the same backlog with the policy off for these
// jobs (each carries the same priority class, and a priority of its own always wins): Kueue
// admits by creation time, so the 12 one-GPU jobs run and the gang, submitted last, waits
// for quota.
func TestLargeJobsFirstOffKeepsArrivalOrder(t *testing.T) {
	inLane(t, clusterLane)
	ns, cq := largeFirstLab(t, "e2e-large-first-off")
	applyForTest(t, decode(t, `
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: `+largeFirstEqual+`}
value: 0
`)...)
	submitLargeFirstBacklog(t, ns, largeFirstEqual)
	eventually(t, time.Minute, "the webhook left the jobs with their own priority alone", func(ctx context.Context) error {
		return jobLabelled(ctx, ns, "gang", largeFirstEqual, "")
	})
	release(t, cq, largeFirstSmallJobs+1)
	eventually(t, 2*time.Minute, "the 12 one-GPU jobs are admitted", func(ctx context.Context) error {
		admitted, err := admittedSmallJobs(ctx, ns)
		if err != nil {
			return err
		}
		if len(admitted) != largeFirstSmallJobs {
			return fmt.Errorf("%d of %d small jobs admitted", len(admitted), largeFirstSmallJobs)
		}
		return nil
	})
	if err := quotaReserved(ns, "gang", false)(t.Context()); err != nil {
		t.Error(err)
	}
}

// largeFirstLab is a namespace with a LocalQueue "team" on a ClusterQueue of its own of 32
// GPUs, held (stopPolicy Hold), and the claim templates one-gpu and four-gpus.
func largeFirstLab(t *testing.T, name string) (ns, cq string) {
	t.Helper()
	requireTrainingBlock(t)
	if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), largefirst.WebhookConfigurationName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		labLacks(t, "gpudra-controller with the gate LargeJobsFirst and its webhook")
	}
	queue := strings.Replace(clusterQueue(name, false, 64, largeFirstGPUs), "namespaceSelector: {}", "namespaceSelector: {}\n  stopPolicy: Hold", 1)
	applyForTest(t, decode(t, queue)...)
	ns = namespace(t, name)
	apply(t, teamQueue(ns, name)+oneGPUTemplate(ns)+fourGPUTemplate("four-gpus", ns))
	return ns, name
}

// submitLargeFirstBacklog creates small-0 … small-11, one GPU each, then gang, 8 pods of 4
// GPUs, one after the other, each with priority class class ("" for none), and waits until
// Kueue has a Workload for every one.
func submitLargeFirstBacklog(t *testing.T, ns, class string) {
	t.Helper()
	for i := range largeFirstSmallJobs {
		apply(t, largeFirstJob(ns, fmt.Sprintf("small-%d", i), "one-gpu", 1, class))
	}
	apply(t, largeFirstJob(ns, "gang", "four-gpus", 8, class))
	eventually(t, time.Minute, "Kueue has a Workload for each job", func(ctx context.Context) error {
		for i := range largeFirstSmallJobs {
			if _, err := workloadOfJob(ctx, ns, fmt.Sprintf("small-%d", i)); err != nil {
				return err
			}
		}
		_, err := workloadOfJob(ctx, ns, "gang")
		return err
	})
}

// largeFirstJob is a Job of pods pods, each with one claim of template, on the training
// block's simulated nodes, in LocalQueue team, with priority class class ("" for none).
func largeFirstJob(ns, name, template string, pods int, class string) string {
	labels := "kueue.x-k8s.io/queue-name: team"
	if class != "" {
		labels += ", kueue.x-k8s.io/priority-class: " + class
	}
	return fmt.Sprintf(`
apiVersion: batch/v1
kind: Job
metadata:
  name: %s
  namespace: %s
  labels: {%s}
spec:
  parallelism: %d
  completions: %d
  completionMode: Indexed
  template:
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 0
      nodeSelector: {%s: hgx-a100-4gpu}
      resourceClaims: [{name: gpu, resourceClaimTemplateName: %s}]
      containers:
      - name: worker
        image: registry.k8s.io/pause:3.10
        resources:
          requests: {cpu: 100m}
          claims: [{name: gpu}]
`, name, ns, labels, pods, pods, lab.LabelProfile, template)
}

// jobLabelled: the Job has priority class class ("" for none) and the webhook's demand
// annotation demand ("" for none).
func jobLabelled(ctx context.Context, ns, name, class, demand string) error {
	job, err := client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if got := job.Labels[largefirst.PriorityClassLabel]; got != class {
		return fmt.Errorf("job %s: %s %q, want %q", name, largefirst.PriorityClassLabel, got, class)
	}
	if got := job.Annotations[largefirst.DemandAnnotation]; got != demand {
		return fmt.Errorf("job %s: %s %q, want %q", name, largefirst.DemandAnnotation, got, demand)
	}
	return nil
}

// queuedIn: Kueue's ClusterQueue cq counts n pending Workloads. A Workload exists before
// Kueue has read its claim templates and put it in the queue; a queue released before
// then would order only the Workloads already in it.
func queuedIn(cq string, n int32) func(context.Context) error {
	return func(ctx context.Context) error {
		u, err := dyn().Resource(clusterQueuesGVR).Get(ctx, cq, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var q kueue.ClusterQueue
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &q); err != nil {
			return err
		}
		if q.Status.PendingWorkloads != n {
			return fmt.Errorf("ClusterQueue %s has %d pending Workloads, want %d", cq, q.Status.PendingWorkloads, n)
		}
		return nil
	}
}

// release sets the ClusterQueue's stopPolicy to None once Kueue has queued every one of its
// n Workloads: Kueue then orders what waits.
func release(t *testing.T, cq string, n int32) {
	t.Helper()
	eventually(t, time.Minute, "Kueue has queued every Workload", queuedIn(cq, n))
	patch := []byte(`{"spec":{"stopPolicy":"None"}}`)
	if _, err := dyn().Resource(clusterQueuesGVR).Patch(t.Context(), cq, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("release ClusterQueue %s: %v", cq, err)
	}
}

// quotaReserved: the Job's Workload has (want) or has not reserved quota.
func quotaReserved(ns, job string, want bool) func(context.Context) error {
	return func(ctx context.Context) error {
		wl, err := workloadOfJob(ctx, ns, job)
		if err != nil {
			return err
		}
		if got := meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved); got != want {
			return fmt.Errorf("job %s: quota reserved %v, want %v (conditions %+v)", job, got, want, wl.Status.Conditions)
		}
		return nil
	}
}

// admittedSmallJobs are the one-GPU jobs whose Workloads have reserved quota.
func admittedSmallJobs(ctx context.Context, ns string) ([]string, error) {
	var out []string
	for i := range largeFirstSmallJobs {
		name := fmt.Sprintf("small-%d", i)
		if err := quotaReserved(ns, name, true)(ctx); err == nil {
			out = append(out, name)
		} else if !strings.Contains(err.Error(), "quota reserved false") {
			return nil, err
		}
	}
	return out, nil
}

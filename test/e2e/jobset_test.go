//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/internal/explain"
	"github.com/gpudra/gpudra/lab"
	"github.com/gpudra/gpudra/queueing/dependencies"
	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

var jobSetsGVR = schema.GroupVersionResource{Group: "jobset.x-k8s.io", Version: "v1alpha2", Resource: "jobsets"}

// requireJobSet ends a test (labLacks) when the lab runs no JobSet controller.
func requireJobSet(t *testing.T) {
	t.Helper()
	requireTrainingBlock(t)
	if _, err := dyn().Resource(jobSetsGVR).List(t.Context(), metav1.ListOptions{Limit: 1}); apierrors.IsNotFound(err) {
		labLacks(t, "the JobSet controller (lab file kueue.jobKinds: [jobset])")
	}
}

// jobSetWorkload is the Kueue Workload the JobSet owns.
func jobSetWorkload(ctx context.Context, ns, name string) (*kueue.Workload, error) {
	wls, err := dyn().Resource(workloadsGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, u := range wls.Items {
		var wl kueue.Workload
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &wl); err != nil {
			return nil, err
		}
		if explain.OwnedBy(&wl, explain.JobSet, name) {
			return &wl, nil
		}
	}
	return nil, fmt.Errorf("no Kueue workload for JobSet %s yet", name)
}

// TestJobSetReplicatedJobInOneRack: a JobSet through a LocalQueue behind the gpudra check,
// with two replicated jobs of one-GPU pods: "workers", 2 Jobs of 2 pods that must share a
// rack, and "eval", 2 Jobs of 1 pod anywhere. Kueue makes a pod set of each; the check
// admits the JobSet and pins each pod to its own planned node, the workers' four in one
// rack, and every pod runs.
func TestJobSetReplicatedJobInOneRack(t *testing.T) {
	inLane(t, clusterLane)
	requireJobSet(t)
	applyForTest(t, decode(t, clusterQueue("e2e-jobset", true, 16, 8))...)
	ns := namespace(t, "e2e-jobset")
	const name = "train-jobset"
	replicatedJob := func(rj string, replicas, pods int, annotations string) string {
		return fmt.Sprintf(`
  - name: %s
    replicas: %d
    template:
      spec:
        parallelism: %d
        completions: %d
        completionMode: Indexed
        template:
          metadata:
            annotations: {%s}
          spec:
            restartPolicy: Never
            terminationGracePeriodSeconds: 0
            schedulingGates: [{name: gpudra.dev/placement}]
            nodeSelector: {%s: hgx-a100-4gpu}
            resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
            containers:
            - name: worker
              image: registry.k8s.io/pause:3.10
              resources:
                requests: {cpu: "1"}
                claims: [{name: gpu}]`, rj, replicas, pods, pods, annotations, lab.LabelProfile)
	}
	apply(t, `
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: gpudra, namespace: `+ns+`}
spec: {clusterQueue: e2e-jobset}
`+quotaTemplate(ns, "one-gpu", `{name: gpu, exactly: {deviceClassName: gpu.gpudra.dev, count: 1}}`)+`
---
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: `+name+`
  namespace: `+ns+`
  labels: {kueue.x-k8s.io/queue-name: gpudra}
spec:
  replicatedJobs:`+replicatedJob("workers", 2, 2, api.AnnotationRequiredTopology+": rack")+replicatedJob("eval", 2, 1, "")+"\n")
	start := time.Now()
	eventually(t, 2*time.Minute, name+": the gpudra check admits its Workload", func(ctx context.Context) error {
		wl, err := jobSetWorkload(ctx, ns, name)
		if err != nil {
			return err
		}
		if len(wl.Spec.PodSets) != 2 {
			return fmt.Errorf("workload %s has %d pod sets, want workers and eval", wl.Name, len(wl.Spec.PodSets))
		}
		for _, c := range wl.Status.AdmissionChecks {
			if c.Name == "gpudra-topology" && c.State == kueue.CheckStateReady {
				return nil
			}
		}
		return fmt.Errorf("workload %s: checks %+v", wl.Name, wl.Status.AdmissionChecks)
	})
	racks := allRunPinned(t, ns, "jobset.sigs.k8s.io/jobset-name="+name, "jobset.sigs.k8s.io/replicatedjob-name",
		map[string]int{"workers": 4, "eval": 2}, "workers")
	if len(racks) != 1 {
		t.Errorf("workers run in racks %v, want one", racks)
	}
	t.Logf("%s: admitted and all 6 pods running %s after submission, workers in rack %v", name, time.Since(start).Round(time.Second), racks)
	if err := dyn().Resource(jobSetsGVR).Namespace(ns).Delete(t.Context(), name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		t.Errorf("delete JobSet %s: %v", name, err)
	}
}

// TestJobRunsAfterAJobSet: a Job with gpudra.dev/run-after: jobset/NAME waits at gpudra's
// admission gate, holding nothing, while the JobSet runs, and runs once the JobSet
// completes (its one pod succeeded).
func TestJobRunsAfterAJobSet(t *testing.T) {
	inLane(t, clusterLane)
	requireJobSet(t)
	ns, queue := dependencyLab(t, "after-jobset")
	apply(t, `
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: prepare
  namespace: `+ns+`
  labels: {kueue.x-k8s.io/queue-name: `+queue+`}
spec:
  replicatedJobs:
  - name: main
    replicas: 1
    template:
      spec:
        backoffLimit: 0
        template:
          spec:
            restartPolicy: Never
            resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
            containers:
            - name: step
              image: registry.k8s.io/pause:3.10
              resources:
                requests: {cpu: "1"}
                claims: [{name: gpu}]
`)
	if err := pipelineStep(t, ns, "train", queue, dependencies.RunAfterAnnotation, "jobset/prepare"); err != nil {
		t.Fatalf("create train: %v", err)
	}
	eventually(t, 2*time.Minute, "prepare's pod runs", jobRuns(ns, "prepare-main-0", 1))
	eventually(t, time.Minute, "train waits for the JobSet, holding nothing", gatedByDependencies(ns, "train", "jobset/prepare (Running)"))
	endPods(t, ns, "prepare-main-0", corev1.PodSucceeded)
	eventually(t, 2*time.Minute, "train runs once the JobSet completed", jobRuns(ns, "train", 1))
}

// allRunPinned waits until the pods of selector in ns all run (as many as want counts), and
// checks that each runs on the node the admission check pinned it to, in its own slot of its
// group (the pods' label groupLabel: a replicated job, a replica type), want[group] pods of
// each. It returns the racks the pods of group racked run in.
func allRunPinned(t *testing.T, ns, selector, groupLabel string, want map[string]int, racked string) map[string]bool {
	t.Helper()
	total := 0
	for _, n := range want {
		total += n
	}
	eventually(t, 4*time.Minute, fmt.Sprintf("all %d pods of %s run", total, selector), func(ctx context.Context) error {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return err
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				running++
			}
		}
		if running != total {
			return fmt.Errorf("%d of %d pods run", running, total)
		}
		return nil
	})
	pods, err := client.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	racks := map[string]bool{}
	slots := map[string]map[int]string{}
	for _, p := range pods.Items {
		group := p.Labels[groupLabel]
		if got := p.Spec.NodeSelector[topology.LabelHostname]; got == "" || got != p.Spec.NodeName {
			t.Errorf("pod %s runs on %s, pinned to %q", p.Name, p.Spec.NodeName, got)
		}
		slot, err := strconv.Atoi(p.Labels[api.LabelPinnedSlot])
		if err != nil {
			t.Errorf("pod %s has no pinned slot (%v)", p.Name, p.Labels)
			continue
		}
		if slots[group] == nil {
			slots[group] = map[int]string{}
		}
		if other, dup := slots[group][slot]; dup {
			t.Errorf("pods %s and %s of %s share slot %d", other, p.Name, group, slot)
		}
		slots[group][slot] = p.Name
		if group == racked {
			racks[nodeRack(p.Spec.NodeName)] = true
		}
	}
	for g, n := range want {
		if len(slots[g]) != n {
			t.Errorf("pinned slots %v, want %d pods of %s", slots, n, g)
		}
	}
	return racks
}

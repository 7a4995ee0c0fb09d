//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/lab"
	"github.com/gpudra/gpudra/queueing/dependencies"
)

// pipelineStep creates a one-pod Job with one GPU (template one-gpu) on the queue, with
// annotations as key, value pairs; err is the API server's answer (a refusal included).
func pipelineStep(t *testing.T, ns, name, queue string, annotations ...string) error {
	t.Helper()
	ann := ""
	for k := 0; k+1 < len(annotations); k += 2 {
		ann += fmt.Sprintf("%q: %q, ", annotations[k], annotations[k+1])
	}
	objs, err := lab.DecodeManifests([]byte(`
apiVersion: batch/v1
kind: Job
metadata:
  name: ` + name + `
  namespace: ` + ns + `
  labels: {kueue.x-k8s.io/queue-name: ` + queue + `}
  annotations: {` + strings.TrimSuffix(ann, ", ") + `}
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
          requests: {cpu: 100m}
          claims: [{name: gpu}]
`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = dyn().Resource(jobsGVR).Namespace(ns).Create(t.Context(), objs[0], metav1.CreateOptions{})
	return err
}

// endPods ends the running pods of a Job as their container would, with phase Succeeded or
// Failed (the lab's kwok nodes run no containers and never end a pod by themselves).
func endPods(t *testing.T, ns, job string, phase corev1.PodPhase) {
	t.Helper()
	pods, err := client.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil {
		t.Fatal(err)
	}
	code := int32(0)
	if phase == corev1.PodFailed {
		code = 1
	}
	for _, p := range pods.Items {
		p.Status.Phase = phase
		now := metav1.Now()
		for k := range p.Status.ContainerStatuses {
			p.Status.ContainerStatuses[k].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, StartedAt: now, FinishedAt: now}}
			p.Status.ContainerStatuses[k].Ready = false
		}
		for k := range p.Status.Conditions {
			if p.Status.Conditions[k].Type == corev1.PodReady || p.Status.Conditions[k].Type == corev1.ContainersReady {
				p.Status.Conditions[k].Status = corev1.ConditionFalse
			}
		}
		if _, err := client.CoreV1().Pods(ns).UpdateStatus(t.Context(), &p, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("ending pod %s: %v", p.Name, err)
		}
	}
}

// jobHas: the Job has condition cond true.
func jobHas(ns, name string, cond batchv1.JobConditionType) func(context.Context) error {
	return func(ctx context.Context) error {
		j, err := client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range j.Status.Conditions {
			if c.Type == cond && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("job %s: no %s condition yet (%+v)", name, cond, j.Status.Conditions)
	}
}

// gatedByDependencies: the Job waits at gpudra's admission gate: suspended, without pods or
// allocated claims, its Workload without quota (QuotaReserved=False, reason
// AdmissionGated), and an Event on the Job says what it waits for.
func gatedByDependencies(ns, job, waitsFor string) func(context.Context) error {
	return func(ctx context.Context) error {
		j, err := client.BatchV1().Jobs(ns).Get(ctx, job, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !strings.Contains(j.Annotations[dependencies.AdmissionGatedBy], dependencies.Gate) {
			return fmt.Errorf("job %s: %s=%q, without gpudra's gate", job, dependencies.AdmissionGatedBy, j.Annotations[dependencies.AdmissionGatedBy])
		}
		if j.Spec.Suspend == nil || !*j.Spec.Suspend {
			return fmt.Errorf("job %s is not suspended", job)
		}
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job})
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("job %s has %d pods while it waits", job, len(pods.Items))
		}
		claims, err := client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, c := range claims.Items {
			if strings.HasPrefix(c.Name, job+"-") && c.Status.Allocation != nil {
				return fmt.Errorf("claim %s of waiting job %s is allocated", c.Name, job)
			}
		}
		wl, err := workloadOfJob(ctx, ns, job)
		if err != nil {
			return err
		}
		if wl.Status.Admission != nil {
			return fmt.Errorf("workload %s holds quota", wl.Name)
		}
		// The condition, or (where a concurrent status write of Kueue's lost it) the Event
		// Kueue records with it.
		if c := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadQuotaReserved); c == nil || c.Status != metav1.ConditionFalse || c.Reason != kueue.WorkloadAdmissionGated {
			if err := eventOn(ctx, ns, wl.Name, kueue.WorkloadAdmissionGated, "Workload admission is gated by: "); err != nil {
				return fmt.Errorf("workload %s: QuotaReserved %+v, want False with reason %s (%v)", wl.Name, c, kueue.WorkloadAdmissionGated, err)
			}
		}
		return eventOn(ctx, ns, job, dependencies.ReasonWaiting, "waiting for "+waitsFor)
	}
}

// workloadOfJob is the Kueue Workload a Job owns.
func workloadOfJob(ctx context.Context, ns, job string) (*kueue.Workload, error) {
	wls, err := dyn().Resource(workloadsGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, u := range wls.Items {
		for _, o := range u.GetOwnerReferences() {
			if o.Kind == "Job" && o.Name == job {
				var wl kueue.Workload
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &wl); err != nil {
					return nil, err
				}
				return &wl, nil
			}
		}
	}
	return nil, fmt.Errorf("no Kueue workload for job %s yet", job)
}

// eventOn: an Event on the object named job (a Job, or a Workload) with reason says note
// (or starts with it).
func eventOn(ctx context.Context, ns, job, reason, note string) error {
	evs, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + job})
	if err != nil {
		return err
	}
	var seen []string
	for _, e := range evs.Items {
		if e.Reason == reason && strings.HasPrefix(e.Message, note) {
			return nil
		}
		seen = append(seen, e.Reason+": "+e.Message)
	}
	return fmt.Errorf("job %s: no %s Event %q yet (events %q)", job, reason, note, seen)
}

// dependencyLab is a namespace with a LocalQueue of 2 GPUs and the template one-gpu.
func dependencyLab(t *testing.T, name string) (ns, queue string) {
	if !state.Kueue {
		labLacks(t, "Kueue (lab file kueue.enabled: false)")
	}
	queue = "e2e-" + name
	applyForTest(t, decode(t, clusterQueue(queue, false, 8, 2))...)
	ns = namespace(t, "e2e-"+name)
	apply(t, teamQueue(ns, queue)+oneGPUTemplate(ns))
	return ns, "team"
}

// TestPipelineRunsStepByStep: preprocess → train → evaluate, each a Job of one GPU in one
// LocalQueue, created together. While preprocess runs, train waits at gpudra's admission
// gate holding nothing (no quota, no pods, no allocated claim) and says what it waits for;
// once preprocess succeeds, train runs, and evaluate after it.
func TestPipelineRunsStepByStep(t *testing.T) {
	inLane(t, clusterLane)
	ns, queue := dependencyLab(t, "pipeline")
	for _, step := range [][]string{{"preprocess"}, {"train", dependencies.RunAfterAnnotation, "preprocess"}, {"evaluate", dependencies.RunAfterAnnotation, "train"}} {
		if err := pipelineStep(t, ns, step[0], queue, step[1:]...); err != nil {
			t.Fatalf("create %s: %v", step[0], err)
		}
	}
	eventually(t, 2*time.Minute, "preprocess runs", jobRuns(ns, "preprocess", 1))
	eventually(t, time.Minute, "train waits for preprocess, holding nothing", gatedByDependencies(ns, "train", "preprocess (Running)"))
	eventually(t, time.Minute, "evaluate waits for train", gatedByDependencies(ns, "evaluate", "train (Suspended)"))

	endPods(t, ns, "preprocess", corev1.PodSucceeded)
	eventually(t, time.Minute, "preprocess is complete", jobHas(ns, "preprocess", batchv1.JobComplete))
	eventually(t, 2*time.Minute, "train runs once preprocess succeeded", jobRuns(ns, "train", 1))
	eventually(t, time.Minute, "train's gate is gone, with an Event saying why", func(ctx context.Context) error {
		return eventOn(ctx, ns, "train", dependencies.ReasonReleased, "dependencies finished: preprocess (Complete)")
	})
	eventually(t, time.Minute, "evaluate waits for train, now running", gatedByDependencies(ns, "evaluate", "train (Running)"))

	endPods(t, ns, "train", corev1.PodSucceeded)
	eventually(t, 2*time.Minute, "evaluate runs once train succeeded", jobRuns(ns, "evaluate", 1))
}

// TestFailedStepFailsTheNext: when a step fails, the step after it (policy fail, the
// default) never runs: its Workload is deactivated and an Event names the failed step; a
// step with gpudra.dev/run-after-failure: run runs anyway.
func TestFailedStepFailsTheNext(t *testing.T) {
	inLane(t, clusterLane)
	ns, queue := dependencyLab(t, "failure")
	if err := pipelineStep(t, ns, "fetch", queue); err != nil {
		t.Fatal(err)
	}
	if err := pipelineStep(t, ns, "digest", queue, dependencies.RunAfterAnnotation, "fetch"); err != nil {
		t.Fatal(err)
	}
	if err := pipelineStep(t, ns, "report", queue, dependencies.RunAfterAnnotation, "fetch", dependencies.FailurePolicyAnnotation, "run"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "fetch runs", jobRuns(ns, "fetch", 1))
	endPods(t, ns, "fetch", corev1.PodFailed)
	eventually(t, time.Minute, "fetch failed", jobHas(ns, "fetch", batchv1.JobFailed))
	eventually(t, time.Minute, "digest's Workload is deactivated, and an Event names fetch", func(ctx context.Context) error {
		wl, err := workloadOfJob(ctx, ns, "digest")
		if err != nil {
			return err
		}
		if wl.Spec.Active == nil || *wl.Spec.Active {
			return fmt.Errorf("workload %s is active", wl.Name)
		}
		return eventOn(ctx, ns, "digest", dependencies.ReasonDependencyFailed, "dependency fetch failed")
	})
	eventually(t, 2*time.Minute, "report runs although fetch failed (policy run)", jobRuns(ns, "report", 1))
	pods, err := client.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "job-name=digest"})
	if err != nil || len(pods.Items) > 0 {
		t.Errorf("digest has pods (%v): it ran after its dependency failed", err)
	}
}

// TestDependencyCycleIsRefused: a Job whose run-after would make it wait for itself is
// refused at creation with the cycle's path, as are bad annotation values; a dependency
// not created yet is waited for.
func TestDependencyCycleIsRefused(t *testing.T) {
	inLane(t, clusterLane)
	ns, queue := dependencyLab(t, "cycle")
	if err := pipelineStep(t, ns, "step-a", queue, dependencies.RunAfterAnnotation, "step-b"); err != nil {
		t.Fatalf("a dependency not created yet is refused: %v", err)
	}
	for _, tc := range []struct {
		name string
		ann  []string
		want string
	}{
		{"step-b", []string{dependencies.RunAfterAnnotation, "step-a"}, "step-b → step-a → step-b"},
		{"step-c", []string{dependencies.RunAfterAnnotation, "step-c"}, "step-c → step-c"},
		{"step-d", []string{dependencies.RunAfterAnnotation, "step-a", dependencies.FailurePolicyAnnotation, "retry"}, "accepted values are fail (the default) and run"},
	} {
		err := pipelineStep(t, ns, tc.name, queue, tc.ann...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("create %s with %v: %v, want a refusal saying %q", tc.name, tc.ann, err, tc.want)
		}
	}
	eventually(t, time.Minute, "step-a waits for step-b", gatedByDependencies(ns, "step-a", "step-b (not created yet)"))
}

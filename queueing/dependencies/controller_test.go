package dependencies

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// eventLog records Events as "name type reason: note".
type eventLog struct {
	mu  sync.Mutex
	got []string
}

var _ events.EventRecorder = (*eventLog)(nil)

func (l *eventLog) Eventf(regarding, _ runtime.Object, eventtype, reason, _, note string, args ...any) {
	m, err := meta.Accessor(regarding)
	if err != nil {
		panic(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, fmt.Sprintf("%s %s %s: %s", m.GetName(), eventtype, reason, fmt.Sprintf(note, args...)))
}

func (l *eventLog) events() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.got)
}

// gatedJob is a job as the webhook admits it: run-after, and the gates.
func gatedJob(name, after string, annotations ...string) *batchv1.Job {
	j := queued(name, append([]string{RunAfterAnnotation, after, AdmissionGatedBy, Gate}, annotations...)...)
	j.Spec.Suspend = new(true)
	return j
}

// finished is a Job with condition cond (Complete or Failed) true; running without one.
func finished(name string, cond batchv1.JobConditionType) *batchv1.Job {
	j := queued(name)
	if cond != "" {
		j.Status.Conditions = []batchv1.JobCondition{{Type: cond, Status: corev1.ConditionTrue}}
	}
	return j
}

// workloadOf is the Workload Kueue makes for job.
func workloadOf(job *batchv1.Job) *kueue.Workload {
	return &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "job-" + job.Name + "-1a2b3",
		Labels: map[string]string{jobUIDLabel: string(job.UID)}}}
}

func reconcileJob(t *testing.T, r *Reconciler, name string) {
	t.Helper()
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}}); err != nil {
		t.Fatal(err)
	}
}

func getJob(t *testing.T, c client.Client, name string) *batchv1.Job {
	t.Helper()
	var j batchv1.Job
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &j); err != nil {
		t.Fatal(err)
	}
	return &j
}

func TestGateRemovedOnceEveryDependencySucceeded(t *testing.T) {
	for _, tc := range []struct {
		name       string
		objs       []client.Object
		wantGates  string // admission-gated-by of train after the reconcile ("" and gone: released)
		wantEvents []string
	}{
		{name: "kept while a dependency runs",
			objs:      []client.Object{gatedJob("train", "preprocess,fetch"), finished("preprocess", "")},
			wantGates: Gate, wantEvents: []string{"train Normal WaitingForDependencies: waiting for preprocess (Running), fetch (not created yet)"}},
		{name: "removed, and the annotation with it, once all are complete",
			objs:      []client.Object{gatedJob("train", "preprocess,fetch"), finished("preprocess", batchv1.JobComplete), finished("fetch", batchv1.JobComplete)},
			wantGates: "", wantEvents: []string{"train Normal DependenciesFinished: dependencies finished: preprocess (Complete), fetch (Complete); admission gate gpudra.dev/run-after removed"}},
		{name: "other gates are kept",
			objs: []client.Object{func() *batchv1.Job {
				j := gatedJob("train", "preprocess")
				j.Annotations[AdmissionGatedBy] = "example.com/quota-check," + Gate
				return j
			}(), finished("preprocess", batchv1.JobComplete)},
			wantGates: "example.com/quota-check", wantEvents: []string{"train Normal DependenciesFinished: dependencies finished: preprocess (Complete); admission gate gpudra.dev/run-after removed"}},
		{name: "policy run: released after a failed dependency",
			objs:      []client.Object{gatedJob("train", "preprocess", FailurePolicyAnnotation, "run"), finished("preprocess", batchv1.JobFailed)},
			wantGates: "", wantEvents: []string{"train Normal DependenciesFinished: dependencies finished: preprocess (Failed); admission gate gpudra.dev/run-after removed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, tc.objs...)
			rec := &eventLog{}
			r := &Reconciler{Client: c, APIReader: c, Recorder: rec}
			reconcileJob(t, r, "train")
			if got := getJob(t, c, "train").Annotations[AdmissionGatedBy]; got != tc.wantGates {
				t.Errorf("%s = %q, want %q", AdmissionGatedBy, got, tc.wantGates)
			}
			if _, has := getJob(t, c, "train").Annotations[AdmissionGatedBy]; has != (tc.wantGates != "") {
				t.Errorf("annotation %s present: %v, want %v", AdmissionGatedBy, has, tc.wantGates != "")
			}
			if got := rec.events(); !slices.Equal(got, tc.wantEvents) {
				t.Errorf("events %q, want %q", got, tc.wantEvents)
			}
		})
	}
}

// A waiting job gets one Event per change of what it waits for, not one per reconcile.
func TestWaitingIsOneEventPerChange(t *testing.T) {
	pre := finished("preprocess", "")
	pre.Spec.Suspend = new(true)
	c := newClient(t, gatedJob("train", "preprocess"), pre)
	rec := &eventLog{}
	r := &Reconciler{Client: c, APIReader: c, Recorder: rec}
	reconcileJob(t, r, "train")
	reconcileJob(t, r, "train")
	pre.Spec.Suspend = new(false)
	if err := c.Update(context.Background(), pre); err != nil {
		t.Fatal(err)
	}
	reconcileJob(t, r, "train")
	reconcileJob(t, r, "train")
	want := []string{
		"train Normal WaitingForDependencies: waiting for preprocess (Suspended)",
		"train Normal WaitingForDependencies: waiting for preprocess (Running)",
	}
	if got := rec.events(); !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}

func TestFailedDependencyDeactivatesTheWorkload(t *testing.T) {
	train := gatedJob("train", "preprocess,fetch")
	c := newClient(t, train, workloadOf(train), finished("preprocess", batchv1.JobFailed), finished("fetch", ""))
	rec := &eventLog{}
	r := &Reconciler{Client: c, APIReader: c, Recorder: rec}
	reconcileJob(t, r, "train")
	reconcileJob(t, r, "train")
	var wl kueue.Workload
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(workloadOf(train)), &wl); err != nil {
		t.Fatal(err)
	}
	if wl.Spec.Active == nil || *wl.Spec.Active {
		t.Errorf("Workload spec.active = %v, want false", wl.Spec.Active)
	}
	if !HasGate(getJob(t, c, "train").Annotations) {
		t.Error("the gate was removed: the job would run after its dependency failed")
	}
	want := []string{"train Warning DependencyFailed: dependency preprocess failed (gpudra.dev/run-after-failure: fail): this job will not run; its Workload job-train-1a2b3 is deactivated"}
	if got := rec.events(); !slices.Equal(got, want) {
		t.Errorf("events %q, want %q (one, naming the failed dependency)", got, want)
	}
}

// Until Kueue has made the Workload, the job waits for it: nothing is deactivated yet.
func TestFailedDependencyWaitsForTheWorkload(t *testing.T) {
	c := newClient(t, gatedJob("train", "preprocess"), finished("preprocess", batchv1.JobFailed))
	r := &Reconciler{Client: c, APIReader: c, Recorder: &eventLog{}}
	res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "train"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter == 0 {
		t.Error("not looked at again: the Workload Kueue makes later would stay active")
	}
}

// Dependents are found from a dependency's change, gated ones only.
func TestDependentsOfAJob(t *testing.T) {
	c := newClient(t, gatedJob("train", "preprocess"), gatedJob("report", "fetch,job/preprocess"), queued("done", RunAfterAnnotation, "preprocess"), finished("preprocess", ""))
	r := &Reconciler{Client: c}
	var got []string
	for _, req := range r.dependents(context.Background(), finished("preprocess", "")) {
		got = append(got, req.Name)
	}
	slices.Sort(got)
	if want := []string{"report", "train"}; !slices.Equal(got, want) {
		t.Errorf("dependents %q, want %q", got, want)
	}
}

// A gated Job is indexed under the Jobs it runs after, and only while it is gated: its
// JobSet dependencies are read, not watched, and an unreadable annotation names none.
func TestRunAfterKeys(t *testing.T) {
	for _, c := range []struct {
		job  *batchv1.Job
		want []string
	}{
		{gatedJob("train", "preprocess, job/fetch,jobset/pretrain"), []string{"preprocess", "fetch"}},
		{queued("done", RunAfterAnnotation, "preprocess"), nil},
		{gatedJob("bad", "preprocess,,fetch"), nil},
	} {
		if got := RunAfterKeys(c.job); !slices.Equal(got, c.want) {
			t.Errorf("%s: keys %q, want %q", c.job.Name, got, c.want)
		}
	}
}

func TestJobSetPhase(t *testing.T) {
	for _, tc := range []struct {
		obj  string
		want Phase
	}{
		{`{"status":{"conditions":[{"type":"Completed","status":"True"}]}}`, PhaseComplete},
		{`{"status":{"conditions":[{"type":"Failed","status":"True"}]}}`, PhaseFailed},
		{`{"spec":{"suspend":true}}`, PhaseSuspended},
		{`{"status":{"conditions":[{"type":"Completed","status":"False"}]}}`, PhaseRunning},
	} {
		var u map[string]any
		if err := json.Unmarshal([]byte(tc.obj), &u); err != nil {
			t.Fatal(err)
		}
		if got := JobSetPhase(&unstructured.Unstructured{Object: u}); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.obj, got, tc.want)
		}
	}
}

// A JobSet dependency is read unstructured: the job waits while it runs and is released
// once it completed; a job waiting on one looks again by itself (JobSets are not watched).
func TestJobSetDependency(t *testing.T) {
	sweep := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
		"metadata": map[string]any{"namespace": ns, "name": "sweep"},
	}}
	c := newClient(t, gatedJob("train", "jobset/sweep"), sweep)
	rec := &eventLog{}
	r := &Reconciler{Client: c, APIReader: c, Recorder: rec}
	res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "train"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter == 0 {
		t.Error("waiting on a JobSet without looking again")
	}
	if err := unstructured.SetNestedSlice(sweep.Object, []any{map[string]any{"type": "Completed", "status": "True"}}, "status", "conditions"); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(context.Background(), sweep); err != nil {
		t.Fatal(err)
	}
	reconcileJob(t, r, "train")
	if HasGate(getJob(t, c, "train").Annotations) {
		t.Error("gate kept after the JobSet completed")
	}
	want := []string{
		"train Normal WaitingForDependencies: waiting for jobset/sweep (Running)",
		"train Normal DependenciesFinished: dependencies finished: jobset/sweep (Complete); admission gate gpudra.dev/run-after removed",
	}
	if got := rec.events(); !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}

// Two jobs that came to wait for each other (created at once, or a run-after changed
// later) get a Warning with the cycle instead of waiting quietly.
func TestCycleAmongWaitingJobsIsReported(t *testing.T) {
	c := newClient(t, gatedJob("step-a", "step-b"), gatedJob("step-b", "step-a"))
	rec := &eventLog{}
	r := &Reconciler{Client: c, APIReader: c, Recorder: rec}
	reconcileJob(t, r, "step-a")
	reconcileJob(t, r, "step-a")
	want := []string{"step-a Warning DependencyCycle: job step-a waits for itself: step-a → step-b → step-a; none of them runs until one is deleted"}
	if got := rec.events(); !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}

// Each change of what a job waits for reaches the API server as an Event of its own, with
// client-go's events.k8s.io recorder: the recorder folds an Event into an earlier one of
// the same type, reason, regarding and related object, keeping the earlier note.
func TestEachWaitingNoteReachesTheAPIServer(t *testing.T) {
	cs := kubefake.NewClientset()
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	broadcaster.StartRecordingToSink(ctx.Done())
	defer broadcaster.Shutdown()
	c := newClient(t, gatedJob("train", "preprocess"))
	r := &Reconciler{Client: c, APIReader: c, Recorder: broadcaster.NewRecorder(c.Scheme(), "gpudra-controller")}
	reconcileJob(t, r, "train")
	pre := finished("preprocess", "")
	pre.Spec.Suspend = new(true)
	if err := c.Create(ctx, pre); err != nil {
		t.Fatal(err)
	}
	reconcileJob(t, r, "train")
	pre.Spec.Suspend = new(false)
	if err := c.Update(ctx, pre); err != nil {
		t.Fatal(err)
	}
	reconcileJob(t, r, "train")
	want := []string{
		"waiting for preprocess (not created yet)",
		"waiting for preprocess (Suspended)",
		"waiting for preprocess (Running)",
	}
	var got []string
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := cs.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		got = got[:0]
		for _, e := range evs.Items {
			got = append(got, e.Note)
		}
		slices.Sort(got)
		return len(got) >= len(want), nil
	})
	slices.Sort(want)
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("Events in the API server %q, want %q", got, want)
	}
}

package dependencies

import (
	"context"
	"fmt"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// Event reasons on a job that runs after others.
const (
	ReasonWaiting          = "WaitingForDependencies"
	ReasonReleased         = "DependenciesFinished"
	ReasonDependencyFailed = "DependencyFailed"
	ReasonInvalid          = "InvalidDependencies"
	ReasonCycle            = "DependencyCycle"
)

// jobUIDLabel is the label Kueue puts on a job's Workload, holding the job's UID.
const jobUIDLabel = "kueue.x-k8s.io/job-uid"

// jobSetGVK is the JobSet kind, read unstructured (gpudra does not import its API).
var jobSetGVK = schema.GroupVersionKind{Group: "jobset.x-k8s.io", Version: "v1alpha2", Kind: "JobSet"}

// jobSetRecheck is how often a job waiting on a JobSet looks again: JobSets are read,
// not watched.
const jobSetRecheck = 30 * time.Second

// Reconciler releases a job's gpudra admission gate once its dependencies succeeded, or
// deactivates its Workload when one failed and its policy is fail.
type Reconciler struct {
	// Client reads Jobs and Workloads (cached) and patches them.
	Client client.Client
	// APIReader reads JobSets (uncached: their API may not be installed).
	APIReader client.Reader
	Recorder  events.EventRecorder

	mu sync.Mutex
	// noted is the last Event note of each waiting job, so that a job gets one Event
	// per change, not one per reconcile.
	noted map[types.NamespacedName]notedEvent
}

// notedEvent is the note of a job's last Event; uid tells a job from one recreated under
// its name. statuses are the dependencies as the note saw them.
type notedEvent struct {
	uid      types.UID
	note     string
	statuses []Status
}

// RunAfterIndex is the cache index of gated Jobs by the Jobs they run after (RunAfterKeys).
const RunAfterIndex = "gpudra.dev/run-after-job"

// RunAfterKeys are the names of the Jobs a gated Job runs after: a Job's change finds the
// jobs waiting for it from this index instead of reading every Job of its namespace (at a
// few thousand Jobs, every Job event walked them all).
func RunAfterKeys(o client.Object) []string {
	if !HasGate(o.GetAnnotations()) {
		return nil
	}
	deps, err := ParseRunAfter(o.GetAnnotations()[RunAfterAnnotation])
	if err != nil {
		return nil
	}
	var out []string
	for _, d := range deps {
		if d.Kind == KindJob {
			out = append(out, d.Name)
		}
	}
	return out
}

// SetupWithManager reconciles gated Jobs, and the gated Jobs that run after a Job whenever
// that Job changes.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &batchv1.Job{}, RunAfterIndex, RunAfterKeys); err != nil {
		return fmt.Errorf("indexing Jobs by %s: %w", RunAfterAnnotation, err)
	}
	gated := predicate.NewPredicateFuncs(func(o client.Object) bool { return HasGate(o.GetAnnotations()) })
	return ctrl.NewControllerManagedBy(mgr).
		Named("job-dependencies").
		For(&batchv1.Job{}, builder.WithPredicates(gated)).
		Watches(&batchv1.Job{}, handler.EnqueueRequestsFromMapFunc(r.dependents)).
		Complete(r)
}

// dependents are the gated Jobs of obj's namespace that run after obj (RunAfterIndex).
func (r *Reconciler) dependents(ctx context.Context, obj client.Object) []reconcile.Request {
	var jobs batchv1.JobList
	if err := r.Client.List(ctx, &jobs, client.InNamespace(obj.GetNamespace()),
		client.MatchingFields{RunAfterIndex: obj.GetName()}, client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "Listing the jobs that run after a job", "job", client.ObjectKeyFromObject(obj))
		return nil
	}
	out := make([]reconcile.Request, 0, len(jobs.Items))
	for k := range jobs.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&jobs.Items[k])})
	}
	return out
}

// Reconcile decides about one gated Job: it releases it, fails it, or records what it
// waits for.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var job batchv1.Job
	if err := r.Client.Get(ctx, req.NamespacedName, &job); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !HasGate(job.Annotations) {
		r.forget(req.NamespacedName)
		return reconcile.Result{}, nil
	}
	spec, ok, err := SpecOf(job.Annotations)
	if !ok && err == nil {
		err = fmt.Errorf("annotation %s is gone: the gate %s stays until the job is recreated", RunAfterAnnotation, Gate)
	}
	if err != nil {
		r.note(&job, corev1.EventTypeWarning, ReasonInvalid, err.Error(), nil)
		return reconcile.Result{}, nil
	}
	statuses, err := r.statuses(ctx, job.Namespace, spec.After)
	if err != nil {
		return reconcile.Result{}, err
	}
	d := Decide(spec, statuses)
	switch d.Action {
	case Release:
		patch := client.MergeFromWithOptions(job.DeepCopy(), client.MergeFromWithOptimisticLock{})
		if rest := withoutGate(job.Annotations[AdmissionGatedBy]); rest != "" {
			job.Annotations[AdmissionGatedBy] = rest
		} else {
			delete(job.Annotations, AdmissionGatedBy)
		}
		if err := r.Client.Patch(ctx, &job, patch); err != nil {
			return reconcile.Result{}, err
		}
		r.forget(req.NamespacedName)
		r.event(&job, nil, corev1.EventTypeNormal, ReasonReleased, d.Note)
		return reconcile.Result{}, nil
	case Fail:
		return r.fail(ctx, &job, d.Note)
	}
	// The webhook refuses cycles at creation, but two jobs created at once, or a
	// run-after changed later, can still close one: say so instead of waiting quietly.
	if path, err := r.cycle(ctx, &job, spec.After); err != nil {
		return reconcile.Result{}, err
	} else if path != "" {
		r.note(&job, corev1.EventTypeWarning, ReasonCycle, fmt.Sprintf("job %s waits for itself: %s; none of them runs until one is deleted", job.Name, path), statuses)
		return reconcile.Result{}, nil
	}
	r.note(&job, corev1.EventTypeNormal, ReasonWaiting, d.Note, statuses)
	for _, s := range statuses {
		if s.Kind == KindJobSet {
			return reconcile.Result{RequeueAfter: jobSetRecheck}, nil
		}
	}
	return reconcile.Result{}, nil
}

// cycle is the path by which job waits for itself through the run-after annotations of its
// namespace's Jobs; empty when there is none.
func (r *Reconciler) cycle(ctx context.Context, job *batchv1.Job, after []Dependency) (string, error) {
	var jobs batchv1.JobList
	if err := r.Client.List(ctx, &jobs, client.InNamespace(job.Namespace)); err != nil {
		return "", err
	}
	return Cycle(job.Name, after, edges(jobs.Items)), nil
}

// fail deactivates the Workload of a job whose dependency failed, once Kueue has made it.
func (r *Reconciler) fail(ctx context.Context, job *batchv1.Job, note string) (reconcile.Result, error) {
	var wls kueue.WorkloadList
	if err := r.Client.List(ctx, &wls, client.InNamespace(job.Namespace), client.MatchingLabels{jobUIDLabel: string(job.UID)}); err != nil {
		return reconcile.Result{}, err
	}
	if len(wls.Items) == 0 {
		// Kueue makes the Workload of a gated job too; look again shortly.
		return reconcile.Result{RequeueAfter: 2 * time.Second}, nil
	}
	for k := range wls.Items {
		wl := &wls.Items[k]
		if wl.Spec.Active != nil && !*wl.Spec.Active {
			continue
		}
		patch := client.MergeFrom(wl.DeepCopy())
		inactive := false
		wl.Spec.Active = &inactive
		if err := r.Client.Patch(ctx, wl, patch); err != nil {
			return reconcile.Result{}, err
		}
		r.forget(client.ObjectKeyFromObject(job))
		r.event(job, nil, corev1.EventTypeWarning, ReasonDependencyFailed, fmt.Sprintf("%s; its Workload %s is deactivated", note, wl.Name))
	}
	return reconcile.Result{}, nil
}

// statuses are the phases of deps in namespace ns.
func (r *Reconciler) statuses(ctx context.Context, ns string, deps []Dependency) ([]Status, error) {
	return Statuses(ctx, r.Client, r.APIReader, ns, deps)
}

// Statuses are the phases of deps in namespace ns, Jobs read from jobs and JobSets from
// jobSets (a reader that needs no informer: the JobSet API may not be installed).
func Statuses(ctx context.Context, jobs, jobSets client.Reader, ns string, deps []Dependency) ([]Status, error) {
	out := make([]Status, 0, len(deps))
	for _, d := range deps {
		var phase Phase
		var obj *corev1.ObjectReference
		var err error
		switch d.Kind {
		case KindJobSet:
			phase, obj, err = jobSetPhase(ctx, jobSets, types.NamespacedName{Namespace: ns, Name: d.Name})
		default:
			phase, obj, err = jobPhase(ctx, jobs, types.NamespacedName{Namespace: ns, Name: d.Name})
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", d.Kind, d.Name, err)
		}
		out = append(out, Status{Dependency: d, Phase: phase, Object: obj})
	}
	return out, nil
}

// reference names the object of kind gvk at key as read: with its UID and
// resourceVersion, or without when it does not exist (o nil).
func reference(gvk schema.GroupVersionKind, key types.NamespacedName, o metav1.Object) *corev1.ObjectReference {
	ref := &corev1.ObjectReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Namespace: key.Namespace, Name: key.Name}
	if o != nil {
		ref.UID, ref.ResourceVersion = o.GetUID(), o.GetResourceVersion()
	}
	return ref
}

func jobPhase(ctx context.Context, c client.Reader, key types.NamespacedName) (Phase, *corev1.ObjectReference, error) {
	gvk := batchv1.SchemeGroupVersion.WithKind("Job")
	var job batchv1.Job
	if err := c.Get(ctx, key, &job); err != nil {
		if apierrors.IsNotFound(err) {
			return PhaseNotCreated, reference(gvk, key, nil), nil
		}
		return "", nil, err
	}
	return JobPhase(&job), reference(gvk, key, &job), nil
}

// JobPhase is where a batch Job stands: Complete or Failed by its conditions, else
// Suspended or Running.
func JobPhase(job *batchv1.Job) Phase {
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return PhaseComplete
		case batchv1.JobFailed:
			return PhaseFailed
		}
	}
	if job.Spec.Suspend != nil && *job.Spec.Suspend {
		return PhaseSuspended
	}
	return PhaseRunning
}

func jobSetPhase(ctx context.Context, c client.Reader, key types.NamespacedName) (Phase, *corev1.ObjectReference, error) {
	js := &unstructured.Unstructured{}
	js.SetGroupVersionKind(jobSetGVK)
	if err := c.Get(ctx, key, js); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return PhaseNotCreated, reference(jobSetGVK, key, nil), nil
		}
		return "", nil, err
	}
	return JobSetPhase(js), reference(jobSetGVK, key, js), nil
}

// JobSetPhase is where a JobSet stands: Complete (its Completed condition) or Failed by
// its conditions, else Suspended or Running.
func JobSetPhase(js *unstructured.Unstructured) Phase {
	conds, _, _ := unstructured.NestedSlice(js.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["status"] != string(corev1.ConditionTrue) {
			continue
		}
		switch m["type"] {
		case "Completed":
			return PhaseComplete
		case "Failed":
			return PhaseFailed
		}
	}
	if s, _, _ := unstructured.NestedBool(js.Object, "spec", "suspend"); s {
		return PhaseSuspended
	}
	return PhaseRunning
}

// note records an Event on job unless its last one said the same. statuses are the
// dependencies the note speaks of: the Event names the one that changed since the last
// note as related. The events.k8s.io recorder folds an Event into an earlier one with the
// same type, reason, regarding and related object (the job's resourceVersion included),
// keeping the earlier note, so without a related object that differs "waiting for a
// (NotCreated)" would go on showing after a was created.
func (r *Reconciler) note(job *batchv1.Job, eventtype, reason, note string, statuses []Status) {
	key := client.ObjectKeyFromObject(job)
	r.mu.Lock()
	if r.noted == nil {
		r.noted = map[types.NamespacedName]notedEvent{}
	}
	last := r.noted[key]
	same := last.uid == job.UID && last.note == note
	r.noted[key] = notedEvent{uid: job.UID, note: note, statuses: statuses}
	r.mu.Unlock()
	if !same {
		r.event(job, changed(last.statuses, statuses), eventtype, reason, note)
	}
}

// changed is the first dependency of now that is not as it was in before, as read; the
// first one if none changed; nil if now has none.
func changed(before, now []Status) *corev1.ObjectReference {
	was := map[Dependency]*corev1.ObjectReference{}
	for _, s := range before {
		was[s.Dependency] = s.Object
	}
	for _, s := range now {
		if s.Object == nil {
			continue
		}
		if w, ok := was[s.Dependency]; !ok || w == nil || w.UID != s.Object.UID || w.ResourceVersion != s.Object.ResourceVersion {
			return s.Object
		}
	}
	for _, s := range now {
		if s.Object != nil {
			return s.Object
		}
	}
	return nil
}

func (r *Reconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	delete(r.noted, key)
	r.mu.Unlock()
}

func (r *Reconciler) event(job *batchv1.Job, related *corev1.ObjectReference, eventtype, reason, note string) {
	if r.Recorder == nil {
		return
	}
	if related == nil {
		r.Recorder.Eventf(job, nil, eventtype, reason, "RunAfter", "%s", note)
		return
	}
	r.Recorder.Eventf(job, related, eventtype, reason, "RunAfter", "%s", note)
}

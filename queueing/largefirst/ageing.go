package largefirst

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// ReasonLifted is the Event a job gets when it is lifted to the top band.
const ReasonLifted = "LiftedToTopBand"

// Ageing lifts a job the policy looked at to the top band once it has waited MaxWait.
//
// A band's priority orders a large job first and also lets it preempt lower-priority jobs
// of its ClusterQueue (withinClusterQueue: LowerPriority), so a stream of large jobs alone
// could keep a small job waiting, or evict it again and again, for ever. A job lifted to
// the top band has the priority of the largest jobs: no banded job preempts it any more
// (preemption needs a strictly lower priority), and among equal priorities Kueue admits
// the oldest first. So a job without a priority of its own waits at most MaxWait plus the
// time the top-band jobs created before it take.
type Ageing struct {
	// Client reads Jobs (cached) and patches their priority-class label.
	Client   client.Client
	Recorder events.EventRecorder
	Bands    Bands
	MaxWait  time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Lift says whether job is to be lifted to the top band now, or after how long to look
// again (0: never). Only jobs the webhook looked at (DemandAnnotation) that are still
// waiting (suspended) are lifted, and only while their class is none or a band's below
// the top: a class a user set is left alone.
func (a *Ageing) Lift(job *batchv1.Job, now time.Time) (lift bool, after time.Duration) {
	if _, ok := job.Annotations[DemandAnnotation]; !ok || !ptr.Deref(job.Spec.Suspend, false) {
		return false, 0
	}
	if job.Spec.Template.Spec.PriorityClassName != "" {
		return false, 0
	}
	class := job.Labels[PriorityClassLabel]
	if class == a.Bands.Top().PriorityClass || (class != "" && !a.Bands.Has(class)) {
		return false, 0
	}
	if waited := now.Sub(job.CreationTimestamp.Time); waited < a.MaxWait {
		return false, a.MaxWait - waited
	}
	return true, 0
}

// SetupWithManager reconciles the Jobs that carry DemandAnnotation.
func (a *Ageing) SetupWithManager(mgr ctrl.Manager) error {
	looked := predicate.NewPredicateFuncs(func(o client.Object) bool {
		_, ok := o.GetAnnotations()[DemandAnnotation]
		return ok
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("large-jobs-first-ageing").
		For(&batchv1.Job{}, builder.WithPredicates(looked)).
		Complete(a)
}

// Reconcile lifts a job that has waited long enough, or looks again when it will have.
func (a *Ageing) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var job batchv1.Job
	if err := a.Client.Get(ctx, req.NamespacedName, &job); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	now := time.Now()
	if a.Now != nil {
		now = a.Now()
	}
	lift, after := a.Lift(&job, now)
	if !lift {
		return reconcile.Result{RequeueAfter: after}, nil
	}
	top := a.Bands.Top().PriorityClass
	from := job.Labels[PriorityClassLabel]
	patch := client.MergeFromWithOptions(job.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if job.Labels == nil {
		job.Labels = map[string]string{}
	}
	job.Labels[PriorityClassLabel] = top
	if err := a.Client.Patch(ctx, &job, patch); err != nil {
		// A conflict too: the job changed since it was read, and is looked at again.
		return reconcile.Result{}, fmt.Errorf("lifting job %s to priority class %s: %w", req, top, err)
	}
	if from == "" {
		from = "none"
	}
	if a.Recorder != nil {
		a.Recorder.Eventf(&job, nil, corev1.EventTypeNormal, ReasonLifted, "LargeJobsFirst",
			"waited longer than %s: priority class %s raised to %s, the top band's, so that larger jobs no longer go first or preempt it", a.MaxWait, from, top)
	}
	return reconcile.Result{}, nil
}

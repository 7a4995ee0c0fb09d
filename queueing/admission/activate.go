package admission

import (
	"context"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// CheckActivator marks gpudra's AdmissionChecks Active: Kueue does not admit through a
// ClusterQueue whose checks' controllers have not said they are running.
type CheckActivator struct {
	Client client.Client
}

// SetupWithManager registers the controller for AdmissionChecks that name gpudra.
func (a *CheckActivator) SetupWithManager(mgr ctrl.Manager) error {
	ours := predicate.NewPredicateFuncs(func(o client.Object) bool {
		ac, ok := o.(*kueue.AdmissionCheck)
		return ok && ac.Spec.ControllerName == api.AdmissionCheckController
	})
	return ctrl.NewControllerManagedBy(mgr).For(&kueue.AdmissionCheck{}, builder.WithPredicates(ours)).Named("gpudra-admissioncheck").Complete(a)
}

// Reconcile sets the check's Active condition to True.
func (a *CheckActivator) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var ac kueue.AdmissionCheck
	if err := a.Client.Get(ctx, req.NamespacedName, &ac); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if ac.Spec.ControllerName != api.AdmissionCheckController || apimeta.IsStatusConditionTrue(ac.Status.Conditions, kueue.AdmissionCheckActive) {
		return ctrl.Result{}, nil
	}
	apimeta.SetStatusCondition(&ac.Status.Conditions, metav1.Condition{
		Type: kueue.AdmissionCheckActive, Status: metav1.ConditionTrue, Reason: "Active",
		Message: "gpudra-controller places gangs with the DRA allocator", ObservedGeneration: ac.Generation,
	})
	return ctrl.Result{}, a.Client.Status().Update(ctx, &ac)
}

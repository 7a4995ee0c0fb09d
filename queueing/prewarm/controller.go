package prewarm

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/locality"
	"github.com/gpudra/gpudra/queueing/admission"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// DefaultMaxDataLoads is how many DataLoads the controller keeps at most, over all
// Workloads, unless told otherwise.
const DefaultMaxDataLoads = 20

// deferredRecheck is when a Workload whose DataLoad the bound kept back looks again.
const deferredRecheck = time.Minute

// maxNamedNodes is how many nodes an Event names at most.
const maxNamedNodes = 10

// Reconciler prewarms the datasets of queued Workloads.
type Reconciler struct {
	// Client reads Workloads, Nodes, PersistentVolumeClaims and PersistentVolumes (cached).
	Client client.Reader
	// Dynamic makes and deletes DataLoads.
	Dynamic dynamic.Interface
	// Served says whether the API server serves DataLoads (Fluid installed); nil: never.
	Served func(context.Context) (bool, error)
	// Recorder records the Events on Workloads.
	Recorder events.EventRecorder
	// MaxDataLoads bounds the DataLoads kept over all Workloads (DefaultMaxDataLoads when 0).
	MaxDataLoads int

	mu sync.Mutex
	// noted are the Event notes each Workload got (by name, with its UID: a Workload made
	// again under the same name starts afresh), so that one gets each once.
	noted map[types.NamespacedName]notes
}

type notes struct {
	uid   types.UID
	notes []string
}

// SetupWithManager reconciles every Workload mgr's cache sees.
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	return builder.ControllerManagedBy(mgr).Named("prewarm").For(&kueue.Workload{}).WithOptions(Options()).Complete(r)
}

// Options are the controller's: its queue lets each Workload through at most every
// second after a failure, backing off to 5 minutes, and all at 2 per second.
func Options() controller.Options {
	return controller.Options{
		RateLimiter: workqueue.NewTypedMaxOfRateLimiter(
			workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, 5*time.Minute),
			&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(2, 10)}),
	}
}

// Reconcile makes the DataLoads of a queued Workload, or notes on it where its pods may
// run, and deletes its DataLoads once it is admitted or ends.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	logger := klog.FromContext(ctx)
	var wl kueue.Workload
	if err := r.Client.Get(ctx, req.NamespacedName, &wl); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
			return reconcile.Result{}, nil // its DataLoads go with it (owner references)
		}
		return reconcile.Result{}, err
	}
	if !queued(&wl) {
		r.forget(req.NamespacedName)
		return reconcile.Result{}, r.deleteDataLoads(ctx, &wl)
	}
	needs, err := needsOf(ctx, r.Client, &wl)
	if err != nil {
		// A malformed annotation: the admission check rejects the Workload, naming it.
		logger.V(2).Info("Workload's datasets not prewarmed", "workload", klog.KObj(&wl), "err", err)
		return reconcile.Result{}, nil
	}
	if len(needs) == 0 {
		return reconcile.Result{}, nil
	}
	served := false
	if r.Served != nil {
		if served, err = r.Served(ctx); err != nil {
			return reconcile.Result{}, err
		}
	}
	var elsewhere []locality.Need
	for _, n := range needs {
		if !served || n.Dataset.Namespace != wl.Namespace {
			elsewhere = append(elsewhere, n)
			continue
		}
		deferred, err := r.ensureDataLoad(ctx, &wl, n.Dataset)
		if err != nil {
			return reconcile.Result{}, err
		}
		if deferred {
			r.note(&wl, "PrewarmDeferred", fmt.Sprintf("dataset %s not prewarmed yet: %d DataLoads are kept at most (--prewarm-max-dataloads)", n.Dataset, r.max()))
			return reconcile.Result{RequeueAfter: deferredRecheck}, nil
		}
	}
	if len(elsewhere) > 0 {
		if err := r.noteNodes(ctx, &wl, elsewhere, served); err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{}, nil
}

// queued: waiting for admission, neither admitted nor ended.
func queued(wl *kueue.Workload) bool {
	c := wl.Status.Conditions
	return !apimeta.IsStatusConditionTrue(c, kueue.WorkloadAdmitted) && !apimeta.IsStatusConditionTrue(c, kueue.WorkloadFinished) &&
		wl.DeletionTimestamp == nil
}

// needsOf are the datasets of all the Workload's pod sets, each once.
func needsOf(ctx context.Context, c client.Reader, wl *kueue.Workload) ([]locality.Need, error) {
	var out []locality.Need
	for i := range wl.Spec.PodSets {
		t := &wl.Spec.PodSets[i].Template
		needs, err := locality.Needs(wl.Namespace, t.Annotations, &t.Spec, admission.Volumes(ctx, c))
		if err != nil {
			return nil, fmt.Errorf("spec.podSets[%d]: %w", i, err)
		}
		out = locality.Merge(out, needs...)
	}
	return out, nil
}

func (r *Reconciler) max() int {
	if r.MaxDataLoads > 0 {
		return r.MaxDataLoads
	}
	return DefaultMaxDataLoads
}

// ensureDataLoad makes the Workload's DataLoad of d unless it exists; deferred when the
// controller keeps its most DataLoads already.
func (r *Reconciler) ensureDataLoad(ctx context.Context, wl *kueue.Workload, d locality.Dataset) (deferred bool, _ error) {
	want := DataLoad(wl, d)
	dls := r.Dynamic.Resource(DataLoadResource).Namespace(d.Namespace)
	if _, err := dls.Get(ctx, want.GetName(), metav1.GetOptions{}); err == nil {
		return false, nil
	} else if !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("DataLoad %s/%s: %w", d.Namespace, want.GetName(), err)
	}
	kept, err := r.Dynamic.Resource(DataLoadResource).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload})
	if err != nil {
		return false, fmt.Errorf("list DataLoads: %w", err)
	}
	if len(kept.Items) >= r.max() {
		return true, nil
	}
	if _, err := dls.Create(ctx, want, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return false, fmt.Errorf("create DataLoad %s/%s: %w", d.Namespace, want.GetName(), err)
	}
	klog.FromContext(ctx).Info("Prewarming a queued Workload's dataset", "workload", klog.KObj(wl), "dataset", d.String(), "dataLoad", want.GetName())
	r.note(wl, "Prewarm", fmt.Sprintf("DataLoad %s warms dataset %s while the Workload is queued", want.GetName(), d))
	return false, nil
}

// deleteDataLoads deletes the Workload's DataLoads, if the API serves them.
func (r *Reconciler) deleteDataLoads(ctx context.Context, wl *kueue.Workload) error {
	if r.Served == nil {
		return nil
	}
	if served, err := r.Served(ctx); err != nil || !served {
		return err
	}
	dls := r.Dynamic.Resource(DataLoadResource).Namespace(wl.Namespace)
	list, err := dls.List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + string(wl.UID)})
	if err != nil {
		return fmt.Errorf("list the DataLoads of Workload %s/%s: %w", wl.Namespace, wl.Name, err)
	}
	for _, dl := range list.Items {
		if err := dls.Delete(ctx, dl.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete DataLoad %s/%s: %w", wl.Namespace, dl.GetName(), err)
		}
	}
	return nil
}

// noteNodes records an Event on the Workload for each dataset it cannot make a DataLoad
// for, naming the nodes its pods may run on (those its pod sets' node selectors match)
// that do not cache it yet.
func (r *Reconciler) noteNodes(ctx context.Context, wl *kueue.Workload, needs []locality.Need, served bool) error {
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes); err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	var candidates []*corev1.Node
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if slices.ContainsFunc(wl.Spec.PodSets, func(ps kueue.PodSet) bool { return matches(n.Labels, ps.Template.Spec.NodeSelector) }) {
			candidates = append(candidates, n)
		}
	}
	why := "no DataLoad kind is served (Fluid is not installed)"
	if served {
		why = "a DataLoad must be in its dataset's namespace, and the Workload's is another"
	}
	for _, need := range needs {
		var cold []string
		cached := 0
		for _, n := range candidates {
			if locality.Caches(n.Labels, need) {
				cached++
			} else {
				cold = append(cold, n.Name)
			}
		}
		slices.Sort(cold)
		named := strings.Join(cold[:min(len(cold), maxNamedNodes)], ", ")
		if len(cold) > maxNamedNodes {
			named += fmt.Sprintf(" and %d more", len(cold)-maxNamedNodes)
		}
		if len(cold) == 0 {
			continue
		}
		r.note(wl, "PrewarmWanted", fmt.Sprintf("dataset %s is cached on %d of the %d nodes its pods may run on; not cached on %s (label %s; %s)",
			need.Dataset, cached, len(candidates), named, locality.LabelKey(need.Dataset), why))
	}
	return nil
}

func matches(labels, selector map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// note records an Event on the Workload, once per note.
func (r *Reconciler) note(wl *kueue.Workload, reason, note string) {
	key := types.NamespacedName{Namespace: wl.Namespace, Name: wl.Name}
	r.mu.Lock()
	if r.noted == nil {
		r.noted = map[types.NamespacedName]notes{}
	}
	n := r.noted[key]
	if n.uid != wl.UID {
		n = notes{uid: wl.UID}
	}
	seen := slices.Contains(n.notes, note)
	if !seen {
		n.notes = append(n.notes, note)
	}
	r.noted[key] = n
	r.mu.Unlock()
	if !seen && r.Recorder != nil {
		r.Recorder.Eventf(wl, nil, corev1.EventTypeNormal, reason, "Prewarm", "%s", note)
	}
}

func (r *Reconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	delete(r.noted, key)
	r.mu.Unlock()
}

// Served asks d whether the API server serves DataLoads, remembering the answer for a
// minute (Fluid installed later is seen within that).
func Served(d discovery.DiscoveryInterface) func(context.Context) (bool, error) {
	var mu sync.Mutex
	var answer bool
	var at time.Time
	return func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		if !at.IsZero() && time.Since(at) < time.Minute {
			return answer, nil
		}
		list, err := d.ServerResourcesForGroupVersion(DataLoadResource.GroupVersion().String())
		switch {
		case apierrors.IsNotFound(err):
			answer = false
		case err != nil:
			return false, fmt.Errorf("discover %s: %w", DataLoadResource.GroupVersion(), err)
		default:
			answer = slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == DataLoadResource.Resource })
		}
		at = time.Now()
		return answer, nil
	}
}

package admission

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/events"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/queueing/gang"
	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// RetryAfter is how long Kueue waits before trying a gang that did not fit again.
const RetryAfter = 15 * time.Second

// reservationTTL bounds how long a placed gang's devices are held in the controller's view
// while its pods' claims are not all seen allocated (then, or when the workload goes, the
// live claims speak).
const reservationTTL = 5 * time.Minute

// Reconciler answers gpudra.dev/topology admission checks.
type Reconciler struct {
	Client client.Client
	// APIReader reads from the API server, not the cache (the manager's GetAPIReader); nil:
	// Client. A decision that meets a conflict is written to what it reads.
	APIReader client.Reader
	// Labels says which node labels hold the network location.
	Labels topology.LabelKeys
	// Now is the clock (tests may replace it).
	Now func() time.Time
	// Workers is how many Workloads are reconciled at once (default 8). Decisions are made
	// one at a time (each sees the devices of the ones before it); their writes overlap.
	Workers int
	// Recorder, when set, records an Event on a Workload for each decision written: Normal
	// GangPlaced with the planned domain, Warning GangDoesNotFit with what did not fit (the
	// check's message), Warning GangRejected.
	Recorder events.EventRecorder

	// decideMu makes a decision and its reservation one step for the other workers.
	decideMu sync.Mutex
	mu       sync.Mutex
	// reserved holds allocations of gangs this controller admitted (or rebuilt from the
	// cluster when it started, recover.go) whose pods have not yet all started, so that two
	// gangs are never placed on the same free devices.
	reserved map[types.UID]reservation
	// rebuilt: the reservations of gangs admitted before this controller started were read
	// from the cluster; rebuildMu makes the first reconciles wait for that.
	rebuilt   atomic.Bool
	rebuildMu sync.Mutex
	// shares remembers each slice's largest share card between decisions.
	shares shareCardMemo
}

type reservation struct {
	key     types.NamespacedName
	results []resourceapi.AllocationResult
	// claims[k] and nodes[k], where set, are the claim results[k] was planned for and its
	// node. The scheduler allocates a claim any fitting device of the node, not the one
	// planned; where that device went to another claim, the reservation is counted by
	// allocating the claim again on the node.
	claims  []*resourceapi.ResourceClaim
	nodes   []string
	pods    int
	expires time.Time
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.Workers <= 0 {
		r.Workers = 8
	}
	b := ctrl.NewControllerManagedBy(mgr).For(&kueue.Workload{}, builder.WithPredicates(workloadEvents())).Named("gpudra-topology").
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Workers})
	// Everything a decision reads, watched without handlers: the informers start with the
	// manager and the workers wait until they are synced. Read lazily, the first decision
	// waited for them (seconds on a 640-node cluster) and decisions could see a cache still
	// filling.
	for _, obj := range []client.Object{&resourceapi.ResourceSlice{}, &resourceapi.ResourceClaim{}, &resourceapi.DeviceClass{},
		&resourceapi.ResourceClaimTemplate{}, &corev1.Node{}, &corev1.Pod{}, &kueue.ResourceFlavor{}, &kueue.AdmissionCheck{}} {
		b = b.Watches(obj, handler.Funcs{})
	}
	return b.Complete(r)
}

// workloadEvents lets through the Workload events the check acts on: a check pending on
// reserved quota (to decide), a workload that ended (its reservation ends), creations and
// deletions. A Workload is written ~9 times around a checked admission; queued, the other
// updates kept workers from decisions (the admission benchmark: 1 058 reconciles for 120
// workloads, 0.5 s in the queue on average).
func workloadEvents() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			wl, ok := e.ObjectNew.(*kueue.Workload)
			if !ok {
				return false
			}
			old, _ := e.ObjectOld.(*kueue.Workload)
			return waitsForADecision(wl) || (ended(wl) && (old == nil || !ended(old)))
		},
	}
}

// quotaReserved: Kueue reserved quota for the Workload. Its admission says so as well as its
// QuotaReserved condition: Kueue v0.19 can lose the condition to a concurrent status write
// of its own, and a gang whose condition went missing must not look unplaced.
func quotaReserved(wl *kueue.Workload) bool {
	return wl.Status.Admission != nil || apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved)
}

// waitsForADecision: quota is reserved and some admission check is pending (which one is
// gpudra's is read in Reconcile).
func waitsForADecision(wl *kueue.Workload) bool {
	if !quotaReserved(wl) {
		return false
	}
	for _, s := range wl.Status.AdmissionChecks {
		if s.State == kueue.CheckStatePending {
			return true
		}
	}
	return false
}

// Reconcile decides one Workload's gpudra.dev/topology check.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	if err := r.ensureReservations(ctx); err != nil {
		return ctrl.Result{}, err
	}
	var wl kueue.Workload
	if err := r.Client.Get(ctx, req.NamespacedName, &wl); err != nil {
		if apierrors.IsNotFound(err) {
			r.releaseKey(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if ended(&wl) {
		r.release(wl.UID)
		return ctrl.Result{}, nil
	}
	checkName, err := r.ourCheck(ctx, &wl)
	if err != nil || checkName == "" {
		return ctrl.Result{}, err
	}
	state := findCheck(&wl, checkName)
	if state == nil || state.State != kueue.CheckStatePending || !quotaReserved(&wl) {
		return ctrl.Result{}, nil
	}

	start := time.Now()
	decision, placement, wait, err := r.decideAndReserve(ctx, &wl)
	if err != nil || wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, err
	}
	decisionSeconds.Observe(time.Since(start).Seconds())
	decisions.WithLabelValues(string(decision.State)).Inc()
	logger.Info("Topology decision", "workload", req.NamespacedName, "state", decision.State, "message", decision.Message)
	decision.Name = kueue.AdmissionCheckReference(checkName)
	decision.LastTransitionTime = metav1.NewTime(r.Now())
	wrote := time.Now()
	written, err := r.writeDecision(ctx, &wl, *decision)
	writeSeconds.Observe(time.Since(wrote).Seconds())
	// Only a decision known not to be written gives its devices back. A write that failed
	// otherwise (a timeout, a dropped connection) may have reached the API server, and Kueue
	// may admit the gang on it: the reservation stays until the next decision for this
	// workload replaces it, the gang's claims are seen allocated, or it expires.
	if !written && err == nil && placement != nil {
		r.release(wl.UID)
	}
	if written {
		r.recordDecision(&wl, decision)
	}
	return ctrl.Result{}, err
}

// Event reasons on Workloads and pods.
const (
	ReasonGangPlaced     = "GangPlaced"
	ReasonGangDoesNotFit = "GangDoesNotFit"
	ReasonGangRejected   = "GangRejected"
	ReasonPodPinned      = "PinnedToPlannedNode"
)

func (r *Reconciler) recordDecision(wl *kueue.Workload, d *kueue.AdmissionCheckState) {
	if r.Recorder == nil {
		return
	}
	switch d.State {
	case kueue.CheckStateReady:
		r.Recorder.Eventf(wl, nil, corev1.EventTypeNormal, ReasonGangPlaced, "Admit", "%s", d.Message)
	case kueue.CheckStateRetry:
		r.Recorder.Eventf(wl, nil, corev1.EventTypeWarning, ReasonGangDoesNotFit, "Retry", "%s", d.Message)
	case kueue.CheckStateRejected:
		r.Recorder.Eventf(wl, nil, corev1.EventTypeWarning, ReasonGangRejected, "Reject", "%s", d.Message)
	}
}

// decideAndReserve makes the decision and reserves the devices it places, as one step for
// the other workers (the next decision, made while this one is written, must not plan onto
// the same devices). wait > 0: the gang does not fit while devices are still held by
// terminating pods (a gang Kueue just preempted for this one), which are about to be free;
// decide again after wait instead of giving the quota back, which would let the preempted
// gang in again.
func (r *Reconciler) decideAndReserve(ctx context.Context, wl *kueue.Workload) (_ *kueue.AdmissionCheckState, _ *gang.Placement, wait time.Duration, _ error) {
	waited := time.Now()
	r.decideMu.Lock()
	defer r.decideMu.Unlock()
	decisionWaitSeconds.Observe(time.Since(waited).Seconds())
	decision, placement, sets, err := r.decide(ctx, wl)
	if err != nil {
		return nil, nil, 0, err
	}
	if decision.State == kueue.CheckStateRetry {
		if n, err := r.terminatingPodsWithClaims(ctx); err != nil {
			return nil, nil, 0, err
		} else if n > 0 {
			log.FromContext(ctx).V(2).Info("Waiting for terminating pods to release their devices", "workload", client.ObjectKeyFromObject(wl), "pods", n)
			return nil, nil, 2 * time.Second, nil
		}
	}
	if placement != nil {
		r.reserve(wl.UID, client.ObjectKeyFromObject(wl), placement, sets)
	}
	return decision, placement, 0, nil
}

// writeConflictRetries bounds how often a decision is written to a fresh read after a conflict.
const writeConflictRetries = 5

// writeDecision records the decision in the Workload's status. The cached Workload often
// trails Kueue's own writes around quota reservation; sending the Workload back to the work
// queue on a conflict would cost a back-off and a whole new decision (seconds per admission
// under load). Instead the decision is written to a fresh read from the API server, as long as that
// still has the check pending on the same quota reservation; if it moved on (evicted,
// reserved elsewhere, deleted), nothing is written and its next event decides again.
func (r *Reconciler) writeDecision(ctx context.Context, wl *kueue.Workload, decision kueue.AdmissionCheckState) (bool, error) {
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	admission := wl.Status.Admission.DeepCopy()
	for attempt := 0; ; attempt++ {
		setCheck(wl, decision)
		err := r.Client.Status().Update(ctx, wl)
		if err == nil {
			return true, nil
		}
		if !apierrors.IsConflict(err) || attempt == writeConflictRetries {
			return false, err
		}
		writeConflicts.Inc()
		var fresh kueue.Workload
		if err := reader.Get(ctx, client.ObjectKeyFromObject(wl), &fresh); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		state := findCheck(&fresh, string(decision.Name))
		if fresh.UID != wl.UID || state == nil || state.State != kueue.CheckStatePending ||
			!quotaReserved(&fresh) ||
			!equality.Semantic.DeepEqual(fresh.Status.Admission, admission) {
			return false, nil
		}
		*wl = fresh
	}
}

// decide plans the gang and turns the outcome into an admission check state.
func (r *Reconciler) decide(ctx context.Context, wl *kueue.Workload) (*kueue.AdmissionCheckState, *gang.Placement, []gang.PodSet, error) {
	start := time.Now()
	sets, err := podSets(ctx, r.Client, wl)
	var bad badInput
	if errors.As(err, &bad) {
		return &kueue.AdmissionCheckState{State: kueue.CheckStateRejected, Message: bad.Error()}, nil, nil, nil
	}
	if err != nil {
		return nil, nil, nil, err
	}
	t0 := time.Now()
	st, net, taints, err := r.snapshot(ctx, wl.UID)
	if err != nil {
		return nil, nil, nil, err
	}
	// A share that no card lets pass, or a request for capacity of a class of whole
	// devices, is refused at once, not after waiting for room.
	if err := refusedBeforePlanning(wl, sets, st, &r.shares); err != nil {
		return &kueue.AdmissionCheckState{State: kueue.CheckStateRejected, Message: err.Error()}, nil, nil, nil
	}
	t1 := time.Now()
	placement, _, err := gang.Plan(ctx, st, net, taints, sets)
	log.FromContext(ctx).V(2).Info("Planned", "workload", client.ObjectKeyFromObject(wl), "podSets", t0.Sub(start), "snapshot", t1.Sub(t0), "plan", time.Since(t1))
	switch {
	case gang.IsUnplaceable(err):
		return &kueue.AdmissionCheckState{State: kueue.CheckStateRetry, Message: err.Error(), RequeueAfterSeconds: ptr.To(int32(RetryAfter / time.Second))}, nil, nil, nil
	case err != nil:
		return &kueue.AdmissionCheckState{State: kueue.CheckStateRejected, Message: err.Error()}, nil, nil, nil
	}
	if err := refusedAsPlaced(wl, sets, st, placement); err != nil {
		return &kueue.AdmissionCheckState{State: kueue.CheckStateRejected, Message: err.Error()}, nil, nil, nil
	}
	ready := &kueue.AdmissionCheckState{State: kueue.CheckStateReady}
	var where []string
	for _, set := range sets {
		domain := placement.Domains[set.Name]
		update := kueue.PodSetUpdate{Name: kueue.PodSetReference(set.Name), NodeSelector: r.nodeSelector(set.Required, domain),
			Labels: map[string]string{api.LabelWorkload: string(wl.UID)},
			// The exact node of each pod; pods that carry the placement scheduling gate are
			// pinned to it by the pod controller (see pods.go), others only get the domain.
			Annotations: map[string]string{api.AnnotationPlacement: strings.Join(placement.Nodes[set.Name], ",")}}
		ready.PodSetUpdates = append(ready.PodSetUpdates, update)
		if set.Required != "" {
			where = append(where, fmt.Sprintf("%s in %s %s", set.Name, set.Required, domain))
		}
		for _, note := range placement.Notes[set.Name] {
			where = append(where, set.Name+": "+note)
		}
	}
	ready.Message = "gang fits: " + strings.Join(append(where, fmt.Sprintf("%d pods placed", countPods(placement))), "; ")
	return ready, placement, sets, nil
}

// terminatingWait bounds how long a pod stuck in deletion makes a gang wait with its quota.
const terminatingWait = 2 * time.Minute

// terminatingPodsWithClaims counts pods with ResourceClaims whose deletion started less than
// terminatingWait ago.
func (r *Reconciler) terminatingPodsWithClaims(ctx context.Context) (int, error) {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.UnsafeDisableDeepCopy); err != nil {
		return 0, err
	}
	n := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil && len(p.Spec.ResourceClaims) > 0 && r.Now().Sub(p.DeletionTimestamp.Time) < terminatingWait {
			n++
		}
	}
	return n, nil
}

func countPods(p *gang.Placement) int {
	n := 0
	for _, nodes := range p.Nodes {
		n += len(nodes)
	}
	return n
}

// nodeSelector pins a pod set to its domain: "b1/r2" at rack level selects block b1 and rack
// r2, "b1/r2/t1" at tor level adds ToR t1.
func (r *Reconciler) nodeSelector(level, domain string) map[string]string {
	switch level {
	case topology.LevelBlock:
		return map[string]string{r.Labels.Block: domain}
	case topology.LevelRack:
		block, rack, _ := strings.Cut(domain, "/")
		return map[string]string{r.Labels.Block: block, r.Labels.Rack: rack}
	case topology.LevelToR:
		parts := strings.SplitN(domain, "/", 3)
		if len(parts) != 3 {
			return nil
		}
		return map[string]string{r.Labels.Block: parts[0], r.Labels.Rack: parts[1], r.Labels.ToR: parts[2]}
	case topology.LevelHostname:
		return map[string]string{topology.LabelHostname: domain}
	}
	return nil
}

// snapshot reads the cluster's DRA state (slices, classes, allocated claims) plus the
// devices of gangs admitted but not yet running, the network and the nodes' taints.
func (r *Reconciler) snapshot(ctx context.Context, self types.UID) (*allocation.State, *topology.Network, gang.Taints, error) {
	st, allocated, err := liveState(ctx, r.Client)
	if err != nil {
		return nil, nil, nil, err
	}
	var planned corev1.PodList
	if err := r.Client.List(ctx, &planned, client.HasLabels{api.LabelWorkload}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, nil, err
	}
	// A gang's pods are accounted for once their claims are allocated in the claims just
	// read (not once they are bound: the claims cache may trail the pods cache, and a
	// reservation dropped before its allocations are seen left devices looking free that
	// the scheduler was binding — the admission benchmark placed gangs on full nodes).
	accounted := map[types.UID]int{}
	for k := range planned.Items {
		p := &planned.Items[k]
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil && claimsAllocated(p, allocated) {
			accounted[types.UID(p.Labels[api.LabelWorkload])]++
		}
	}
	r.mu.Lock()
	now := r.Now()
	for uid, res := range r.reserved {
		// Once every pod's claims are allocated, the gang's devices are in st already.
		if now.After(res.expires) || accounted[uid] >= res.pods {
			delete(r.reserved, uid)
			continue
		}
		if uid == self {
			continue
		}
		for k := range res.results {
			result := &res.results[k]
			if k >= len(res.claims) || res.claims[k] == nil || !st.Taken(result) {
				st.Commit(result)
				continue
			}
			// The planned devices went to another claim (the scheduler chose them for a
			// pod of another gang): the same claim still needs as much on its node.
			if _, err := st.AllocateAndCommit(ctx, res.nodes[k], res.claims[k]); err != nil {
				holdNode(st, res.nodes[k])
			}
		}
	}
	r.mu.Unlock()
	net, taints, err := r.network(ctx)
	return st, net, taints, err
}

// network is the network the nodes' labels describe, and the nodes' taints.
func (r *Reconciler) network(ctx context.Context) (*topology.Network, gang.Taints, error) {
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, err
	}
	labels := map[string]map[string]string{}
	taints := gang.Taints{}
	for _, n := range nodes.Items {
		if _, ok := n.Labels[r.Labels.Rack]; ok {
			labels[n.Name] = n.Labels
			if len(n.Spec.Taints) > 0 {
				taints[n.Name] = n.Spec.Taints
			}
		}
	}
	net, err := topology.NetworkFromLabels(labels, r.Labels)
	return net, taints, err
}

// liveState is the cluster's DRA state as the scheduler sees it: DeviceClasses,
// ResourceSlices and the devices of allocated ResourceClaims; allocated holds the
// namespace/name of every allocated claim it counted.
//
// The lists share the informer cache's objects instead of deep-copying them (on a 640-node
// cluster the copies cost more than the planning): nothing here or in allocation writes to
// them.
func liveState(ctx context.Context, c client.Reader) (_ *allocation.State, allocated map[types.NamespacedName]bool, _ error) {
	var slices resourceapi.ResourceSliceList
	if err := c.List(ctx, &slices, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, err
	}
	var classes resourceapi.DeviceClassList
	if err := c.List(ctx, &classes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, err
	}
	var claims resourceapi.ResourceClaimList
	if err := c.List(ctx, &claims, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, err
	}
	allocated = map[types.NamespacedName]bool{}
	for k := range claims.Items {
		if claims.Items[k].Status.Allocation != nil {
			allocated[client.ObjectKeyFromObject(&claims.Items[k])] = true
		}
	}
	st, _ := allocation.FromCluster(classes.Items, slices.Items, claims.Items)
	return st, allocated, nil
}

// claimsAllocated: every ResourceClaim of the pod is among the allocated ones (named as
// resourceclaim.Name names them: a claim from a template once the pod's status names it;
// the claim kube-scheduler makes for extended resources, such as an NVLink group, is
// named in the status before it binds).
func claimsAllocated(pod *corev1.Pod, allocated map[types.NamespacedName]bool) bool {
	if ext := pod.Status.ExtendedResourceClaimStatus; ext != nil && !allocated[types.NamespacedName{Namespace: pod.Namespace, Name: ext.ResourceClaimName}] {
		return false
	}
	for k := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[k])
		if err != nil || name == nil || !allocated[types.NamespacedName{Namespace: pod.Namespace, Name: *name}] {
			return false
		}
	}
	return true
}

func (r *Reconciler) reserve(uid types.UID, key types.NamespacedName, p *gang.Placement, sets []gang.PodSet) {
	res := reservation{key: key, pods: countPods(p), expires: r.Now().Add(reservationTTL)}
	byName := map[string]gang.PodSet{}
	for _, s := range sets {
		byName[s.Name] = s
	}
	names := make([]string, 0, len(p.Allocations))
	for n := range p.Allocations {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		set, known := byName[n]
		for i, pod := range p.Allocations[n] {
			var claims []*resourceapi.ResourceClaim
			if known {
				claims = podClaims(set, i)
			}
			for k := range pod {
				res.results = append(res.results, pod[k])
				res.nodes = append(res.nodes, p.Nodes[n][i])
				var claim *resourceapi.ResourceClaim
				if k < len(claims) {
					claim = claims[k]
				}
				res.claims = append(res.claims, claim)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reserved == nil {
		r.reserved = map[types.UID]reservation{}
	}
	r.reserved[uid] = res
}

// releaseKey drops the reservation of a deleted workload.
func (r *Reconciler) releaseKey(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for uid, res := range r.reserved {
		if res.key == key {
			delete(r.reserved, uid)
		}
	}
}

func (r *Reconciler) release(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.reserved, uid)
}

// doneState: once pods run (PodsReady), finished or evicted, the live claims are the truth.
// A controller that starts reads them from caches synced before its first decision.
func doneState(wl *kueue.Workload) bool {
	return apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadPodsReady) || ended(wl)
}

// ended: the workload finished or was evicted; its pods go, and what they hold is freed.
// PodsReady alone does not end a reservation: the Workload cache can show it before the
// claims cache shows the pods' allocations, and a reservation dropped then leaves the
// gang's devices looking free to the next decision. Those reservations end when the
// claims are seen allocated (snapshot) or expire.
func ended(wl *kueue.Workload) bool {
	c := wl.Status.Conditions
	return apimeta.IsStatusConditionTrue(c, kueue.WorkloadFinished) ||
		apimeta.IsStatusConditionTrue(c, kueue.WorkloadEvicted)
}

// ourCheck finds the workload's admission check that gpudra controls.
func (r *Reconciler) ourCheck(ctx context.Context, wl *kueue.Workload) (string, error) {
	for _, s := range wl.Status.AdmissionChecks {
		var ac kueue.AdmissionCheck
		if err := r.Client.Get(ctx, types.NamespacedName{Name: string(s.Name)}, &ac); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return "", err
		}
		if ac.Spec.ControllerName == api.AdmissionCheckController {
			return string(s.Name), nil
		}
	}
	return "", nil
}

func findCheck(wl *kueue.Workload, name string) *kueue.AdmissionCheckState {
	for k := range wl.Status.AdmissionChecks {
		if string(wl.Status.AdmissionChecks[k].Name) == name {
			return &wl.Status.AdmissionChecks[k]
		}
	}
	return nil
}

func setCheck(wl *kueue.Workload, s kueue.AdmissionCheckState) {
	for k := range wl.Status.AdmissionChecks {
		if wl.Status.AdmissionChecks[k].Name == s.Name {
			s.RetryCount = wl.Status.AdmissionChecks[k].RetryCount
			wl.Status.AdmissionChecks[k] = s
			return
		}
	}
	wl.Status.AdmissionChecks = append(wl.Status.AdmissionChecks, s)
}

package admission

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/queueing/gang"
	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// The reservations live in memory only. A controller that starts, or takes the lead from
// another replica, starts without them while gangs admitted before it may still be waiting
// for their claims to be allocated; deciding then would plan a second gang onto those
// devices. So before its first decision it rebuilds them from what the check wrote into
// the cluster:
//
//   - Workloads whose gpudra check is Ready with quota reserved, not yet done (PodsReady,
//     Finished or Evicted), and decided less than reservationTTL ago (the previous holder
//     would have dropped older ones);
//   - each pod set's podSetUpdate: the gpudra.dev/placement annotation lists the planned
//     node of every pod;
//   - the gang's pods (label gpudra.dev/workload-uid): a bound pod whose claims are
//     allocated holds its devices in the live claims already, and its slot (its
//     gpudra.dev/pinned-slot label, else one slot on its node) is not reserved again.
//
// Which devices a decision reserved was never written down. The pod sets' claims are
// allocated again on each remaining pod's planned node, over the live allocations and the
// gangs rebuilt before (oldest decision first): the same amount of devices on the same
// nodes, which is what the scheduler will allocate there. Where that is not known exactly,
// more is held, never less:
//
//   - a pod's claims no longer fit on its planned node, or its claims cannot be read (a
//     claim template deleted since): every free device of its planned nodes is held;
//   - a pod set without a usable node list (no annotation, or not one node per pod): its
//     whole count is planned anew inside the domain its podSetUpdate's node selector names,
//     pods already running included.
//
// Rebuilt reservations end as the ones made by decisions do: when every pod's claims are
// seen allocated, when the workload is done or deleted, or at the decision's time plus
// reservationTTL.

// ensureReservations rebuilds the reservations once, before the first decision; every
// reconcile waits for it. A failed rebuild is returned (the reconcile is retried with
// back-off) and tried again by the next reconcile: no decision is made without it.
func (r *Reconciler) ensureReservations(ctx context.Context) error {
	if r.rebuilt.Load() {
		return nil
	}
	r.rebuildMu.Lock()
	defer r.rebuildMu.Unlock()
	if r.rebuilt.Load() {
		return nil
	}
	start := time.Now()
	n, err := r.rebuildReservations(ctx)
	if err != nil {
		return fmt.Errorf("rebuilding the reservations of admitted gangs: %w", err)
	}
	r.rebuilt.Store(true)
	log.FromContext(ctx).Info("Rebuilt the reservations of admitted gangs", "gangs", n, "took", time.Since(start))
	return nil
}

// admittedGang is a Workload whose gpudra check is Ready and whose devices may still be
// unallocated.
type admittedGang struct {
	wl      *kueue.Workload
	check   *kueue.AdmissionCheckState
	expires time.Time
}

// rebuildReservations reads the reservations of gangs admitted before this controller
// started and adds them to the ones it holds; it returns how many it rebuilt.
func (r *Reconciler) rebuildReservations(ctx context.Context) (int, error) {
	var checks kueue.AdmissionCheckList
	if err := r.Client.List(ctx, &checks); err != nil {
		return 0, err
	}
	ours := map[kueue.AdmissionCheckReference]bool{}
	for _, ac := range checks.Items {
		if ac.Spec.ControllerName == api.AdmissionCheckController {
			ours[kueue.AdmissionCheckReference(ac.Name)] = true
		}
	}
	var workloads kueue.WorkloadList
	if err := r.Client.List(ctx, &workloads); err != nil {
		return 0, err
	}
	now := r.Now()
	var gangs []admittedGang
	for k := range workloads.Items {
		wl := &workloads.Items[k]
		if doneState(wl) || !quotaReserved(wl) {
			continue
		}
		for i := range wl.Status.AdmissionChecks {
			s := &wl.Status.AdmissionChecks[i]
			if !ours[s.Name] || s.State != kueue.CheckStateReady {
				continue
			}
			expires := now.Add(reservationTTL)
			if !s.LastTransitionTime.IsZero() {
				expires = s.LastTransitionTime.Add(reservationTTL)
			}
			if now.Before(expires) {
				gangs = append(gangs, admittedGang{wl: wl, check: s, expires: expires})
			}
			break
		}
	}
	if len(gangs) == 0 {
		return 0, nil
	}
	slices.SortFunc(gangs, func(a, b admittedGang) int {
		if c := a.check.LastTransitionTime.Compare(b.check.LastTransitionTime.Time); c != 0 {
			return c
		}
		return strings.Compare(a.wl.Namespace+"/"+a.wl.Name, b.wl.Namespace+"/"+b.wl.Name)
	})

	st, allocated, err := liveState(ctx, r.Client)
	if err != nil {
		return 0, err
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.HasLabels{api.LabelWorkload}); err != nil {
		return 0, err
	}
	running := map[types.UID][]*corev1.Pod{}
	for k := range pods.Items {
		p := &pods.Items[k]
		// A pod whose claims are allocated holds its devices in the live claims, bound or
		// not yet: the scheduler writes the allocation before the binding, and a pod counted
		// as not running then was reserved again on top of its own claims, which filled its
		// node in the rebuild and left a later gang there with nothing held.
		if podNode(p) != "" && p.DeletionTimestamp == nil && claimsAllocated(p, allocated) {
			uid := types.UID(p.Labels[api.LabelWorkload])
			running[uid] = append(running[uid], p)
		}
	}
	rebuilt := map[types.UID]reservation{}
	var net *topology.Network
	network := func(ctx context.Context) (*topology.Network, error) {
		if net != nil {
			return net, nil
		}
		var err error
		net, _, err = r.network(ctx)
		return net, err
	}
	for _, g := range gangs {
		res, err := r.recoverGang(ctx, st, g, running[g.wl.UID], network)
		if err != nil {
			return 0, fmt.Errorf("workload %s/%s: %w", g.wl.Namespace, g.wl.Name, err)
		}
		if len(res.results) > 0 {
			rebuilt[g.wl.UID] = res
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reserved == nil {
		r.reserved = map[types.UID]reservation{}
	}
	for uid, res := range rebuilt {
		if _, held := r.reserved[uid]; !held {
			r.reserved[uid] = res
		}
	}
	return len(rebuilt), nil
}

// recoverGang rebuilds one gang's reservation over st, committing what it reserves into st.
// running are the gang's pods whose claims are allocated.
func (r *Reconciler) recoverGang(ctx context.Context, st *allocation.State, g admittedGang, running []*corev1.Pod, network func(context.Context) (*topology.Network, error)) (reservation, error) {
	logger := log.FromContext(ctx).WithValues("workload", client.ObjectKeyFromObject(g.wl))
	res := reservation{key: client.ObjectKeyFromObject(g.wl), expires: g.expires}
	for _, ps := range g.wl.Spec.PodSets {
		res.pods += int(ps.Count)
	}
	sets, err := podSets(ctx, r.Client, g.wl)
	var bad badInput
	if errors.As(err, &bad) || apierrors.IsNotFound(err) {
		logger.Info("Claims of an admitted gang cannot be read; holding every free device of its planned nodes", "reason", err.Error())
		sets = nil
	} else if err != nil {
		return reservation{}, err
	}
	claims := map[string]gang.PodSet{}
	for _, s := range sets {
		claims[s.Name] = s
	}
	updates := map[string]*kueue.PodSetUpdate{}
	for k := range g.check.PodSetUpdates {
		updates[string(g.check.PodSetUpdates[k].Name)] = &g.check.PodSetUpdates[k]
	}

	// The planned node of every pod, less the slots of pods that hold their devices.
	planned := map[string][]string{}
	plan := map[string]string{}
	var unknown []kueue.PodSet
	for _, ps := range g.wl.Spec.PodSets {
		name := string(ps.Name)
		u := updates[name]
		var nodes []string
		if u != nil && u.Annotations[api.AnnotationPlacement] != "" {
			nodes = strings.Split(u.Annotations[api.AnnotationPlacement], ",")
		}
		if len(nodes) != int(ps.Count) {
			unknown = append(unknown, ps)
			continue
		}
		planned[name], plan[name] = nodes, u.Annotations[api.AnnotationPlacement]
	}
	for _, p := range running {
		takeSlot(planned, plan, p, len(unknown) == 0)
	}

	// add records one result with the claim and node it was planned for, as a decision's
	// reservation does: when the scheduler gives those devices to another pod, the claim is
	// allocated again on its node rather than counted on devices already counted (a rebuilt
	// gang then held one device less than it planned, and a new leader placed another gang
	// on a node that was full).
	add := func(r resourceapi.AllocationResult, node string, claim *resourceapi.ResourceClaim) {
		res.results = append(res.results, r)
		res.nodes = append(res.nodes, node)
		res.claims = append(res.claims, claim)
	}
	hold := func(node string) {
		if r := holdNode(st, node); r != nil {
			add(*r, node, nil)
		}
	}
	held := map[string]bool{}
	for _, ps := range g.wl.Spec.PodSets {
		name := string(ps.Name)
		set, known := claims[name]
		for i, node := range planned[name] {
			if node == "" || held[node] {
				continue
			}
			if !known {
				hold(node)
				held[node] = true
				continue
			}
			pc := podClaims(set, i)
			got, err := st.AllocateAndCommit(ctx, node, pc...)
			if err != nil {
				logger.Info("Claims of an admitted pod do not fit on its planned node again; holding its free devices", "podSet", name, "node", node, "reason", err.Error())
				hold(node)
				held[node] = true
				continue
			}
			for k := range got {
				add(got[k], node, pc[k])
			}
		}
	}

	for _, ps := range unknown {
		name := string(ps.Name)
		set, known := claims[name]
		u := updates[name]
		if !known || u == nil {
			logger.Info("An admitted pod set has neither its nodes nor its claims to rebuild from; nothing held for it", "podSet", name)
			continue
		}
		net, err := network(ctx)
		if err != nil {
			return reservation{}, err
		}
		set.NodeSelector = maps.Clone(set.NodeSelector)
		if set.NodeSelector == nil {
			set.NodeSelector = map[string]string{}
		}
		maps.Copy(set.NodeSelector, u.NodeSelector)
		placement, _, err := gang.Plan(ctx, st, net, nil, []gang.PodSet{set})
		if err != nil {
			logger.Info("An admitted pod set without its planned nodes does not fit in its domain again; nothing held for it", "podSet", name, "reason", err.Error())
			continue
		}
		for i, pod := range placement.Allocations[name] {
			pc := podClaims(set, i)
			for k := range pod {
				st.Commit(&pod[k])
				var claim *resourceapi.ResourceClaim
				if k < len(pc) {
					claim = pc[k]
				}
				add(pod[k], placement.Nodes[name][i], claim)
			}
		}
	}
	return res, nil
}

// takeSlot removes a running pod's slot from its pod set's planned nodes. The pod set is
// the one whose placement the pod carries; a pod without one is matched by its node, but
// only when every pod set has its nodes (else it may belong to one that has not, and its
// slot stays reserved). The slot is the one it was pinned to when that is on its node,
// else the first one on its node.
func takeSlot(planned map[string][]string, plan map[string]string, p *corev1.Pod, byNode bool) {
	want := p.Annotations[api.AnnotationPlacement]
	if want == "" && !byNode {
		return
	}
	for _, name := range slices.Sorted(maps.Keys(planned)) {
		if want != "" && plan[name] != want {
			continue
		}
		nodes := planned[name]
		node := podNode(p)
		if slot, err := strconv.Atoi(p.Labels[api.LabelPinnedSlot]); err == nil && slot >= 0 && slot < len(nodes) && nodes[slot] == node {
			nodes[slot] = ""
			return
		}
		if i := slices.Index(nodes, node); i >= 0 {
			nodes[i] = ""
			return
		}
	}
}

// podNode is the node a pod is bound to or, before its binding, pinned to (the node
// selector the pinner set); "" for neither.
func podNode(p *corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName
	}
	return p.Spec.NodeSelector[topology.LabelHostname]
}

// podClaims are pod i's claims of the set, named as the planner names them.
func podClaims(set gang.PodSet, i int) []*resourceapi.ResourceClaim {
	out := make([]*resourceapi.ResourceClaim, len(set.Claims))
	for k, spec := range set.Claims {
		c := &resourceapi.ResourceClaim{Spec: *spec.DeepCopy()}
		c.Namespace = "gang"
		c.Name = fmt.Sprintf("%s-%d-%d", set.Name, i, k)
		c.UID = types.UID(c.Name)
		out[k] = c
	}
	return out
}

// holdNode commits every device of the node's own slices that is free in st, as one
// allocation result (nil when none is free). Devices that allow several allocations are
// held whole as well.
func holdNode(st *allocation.State, node string) *resourceapi.AllocationResult {
	usage := st.NodeUsage(node)
	var out resourceapi.AllocationResult
	for _, sl := range st.Slices() {
		if sl.Spec.NodeName == nil || *sl.Spec.NodeName != node {
			continue
		}
		for _, dev := range sl.Spec.Devices {
			if usage.InUse(sl.Spec.Driver, sl.Spec.Pool.Name, dev) {
				continue
			}
			out.Devices.Results = append(out.Devices.Results, resourceapi.DeviceRequestAllocationResult{
				Request: "held", Driver: sl.Spec.Driver, Pool: sl.Spec.Pool.Name, Device: dev.Name})
		}
	}
	if len(out.Devices.Results) == 0 {
		return nil
	}
	st.Commit(&out)
	return &out
}

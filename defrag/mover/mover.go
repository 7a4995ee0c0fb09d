package mover

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/defrag"
	"github.com/gpudra/gpudra/queueing/admission"
	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// Mover plans room for waiting Workloads and moves pods to make it, one plan per
// Interval, only while no pod with claims is terminating (the last plan's moves are still
// under way). Every Interval it also measures the cluster's fragmentation and the moves
// that would free one whole node, as gauges (Measure).
type Mover struct {
	Client client.Client
	// Labels place nodes in the network, as the admission check's.
	Labels topology.LabelKeys
	// Interval is the time between plans.
	Interval time.Duration
	// EvictionsPerMinute bounds the rate of evictions.
	EvictionsPerMinute int
	// MaxEvictions bounds the pods one plan moves.
	MaxEvictions int
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// HoldTimeout bounds how long the nodes a plan frees are held (tainted) while the
	// evicted pods' replacements are placed elsewhere (2 minutes when 0).
	HoldTimeout time.Duration

	limiter flowcontrol.RateLimiter
	// moved are, per waiting Workload, the owners (a pod's controller, else the pod) whose
	// pods were evicted to make room for it. A plan that would evict one of them again is
	// not carried out: the scheduler put its replacement back into the room it left (one
	// that does not pack: the gpudra-fragmentation profile does), and evicting again would
	// only go round.
	moved map[string]map[types.UID]bool
}

// NeedLeaderElection: only the leader moves pods.
func (m *Mover) NeedLeaderElection() bool { return true }

// Start plans and moves every Interval until ctx ends.
func (m *Mover) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("defrag")
	// A holder that stopped mid-plan (a restart, a lost lease) left its taints.
	if err := m.release(ctx, nil); err != nil {
		logger.Error(err, "Releasing the nodes an earlier plan held")
	}
	t := time.NewTicker(m.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := m.Measure(ctx); err != nil {
			logger.Error(err, "Measuring fragmentation")
		}
		if err := m.Once(ctx); err != nil {
			logger.Error(err, "Defragmentation")
		}
	}
}

// Once plans for the Workloads waiting for room, oldest first, and carries out the first
// plan that moves something.
func (m *Mover) Once(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("defrag")
	if m.limiter == nil {
		m.limiter = flowcontrol.NewTokenBucketRateLimiter(float32(m.EvictionsPerMinute)/60, 1)
	}
	busy, err := m.terminating(ctx)
	if err != nil || busy {
		return err
	}
	waiting, err := m.waiting(ctx)
	if err != nil {
		return err
	}
	m.forgetAdmitted(waiting)
	if len(waiting) == 0 {
		return nil
	}
	cluster, err := m.cluster(ctx)
	if err != nil {
		return err
	}
	for _, wl := range waiting {
		sets, err := admission.PodSets(ctx, m.Client, wl)
		if err != nil {
			logger.V(2).Info("Pod sets not read", "workload", klog.KObj(wl), "err", err)
			continue
		}
		name := wl.Namespace + "/" + wl.Name
		res, err := defrag.Plan(ctx, cluster, defrag.Goal{Workload: &defrag.Workload{Name: name, PodSets: sets}, MaxEvictions: m.MaxEvictions}, defrag.Options{Labels: m.Labels})
		if err != nil {
			return err
		}
		switch {
		case !res.Found:
			plans.WithLabelValues("none").Inc()
			logger.V(2).Info("No plan", "workload", klog.KObj(wl), "reason", res.Reason)
			continue
		case len(res.Moves) == 0:
			plans.WithLabelValues("fits").Inc()
			continue
		}
		if again := m.movedBefore(ctx, name, res.Moves); again != "" {
			plans.WithLabelValues("none").Inc()
			logger.Info("Plan not carried out: a pod moved for this Workload came back to the room it left; defragmentation needs a scheduler that packs (the gpudra-fragmentation profile)", "workload", klog.KObj(wl), "pod", again)
			continue
		}
		if why := m.unmovable(ctx, res.Moves); why != "" {
			plans.WithLabelValues("none").Inc()
			logger.V(2).Info("Plan not carried out", "workload", klog.KObj(wl), "reason", why)
			continue
		}
		plans.WithLabelValues("moved").Inc()
		logger.Info("Moving pods to make room", "workload", klog.KObj(wl), "moves", len(res.Moves), "evictions", res.Evictions)
		return m.carryOut(ctx, name, res.Moves)
	}
	return nil
}

// waiting are the Workloads not admitted whose gang the gpudra.dev/topology check found
// not to fit (its state Retry, or the Workload evicted for it and not admitted since),
// oldest first.
func (m *Mover) waiting(ctx context.Context) ([]*kueue.Workload, error) {
	checks, err := m.ourChecks(ctx)
	if err != nil || len(checks) == 0 {
		return nil, err
	}
	var list kueue.WorkloadList
	if err := m.Client.List(ctx, &list); err != nil {
		return nil, err
	}
	var out []*kueue.Workload
	for k := range list.Items {
		wl := &list.Items[k]
		c := wl.Status.Conditions
		if apimeta.IsStatusConditionTrue(c, kueue.WorkloadAdmitted) || apimeta.IsStatusConditionTrue(c, kueue.WorkloadFinished) {
			continue
		}
		retry := false
		for _, s := range wl.Status.AdmissionChecks {
			retry = retry || checks[string(s.Name)] && s.State == kueue.CheckStateRetry
		}
		if ev := apimeta.FindStatusCondition(c, kueue.WorkloadEvicted); ev != nil && ev.Reason == kueue.WorkloadEvictedByAdmissionCheck {
			retry = true
		}
		if retry {
			out = append(out, wl)
		}
	}
	slices.SortFunc(out, func(a, b *kueue.Workload) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return out, nil
}

// ourChecks are the names of the AdmissionChecks gpudra's controller answers.
func (m *Mover) ourChecks(ctx context.Context) (map[string]bool, error) {
	var acs kueue.AdmissionCheckList
	if err := m.Client.List(ctx, &acs); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, ac := range acs.Items {
		if ac.Spec.ControllerName == api.AdmissionCheckController {
			out[ac.Name] = true
		}
	}
	return out, nil
}

// terminating: a pod with claims is being deleted (a move under way).
func (m *Mover) terminating(ctx context.Context) (bool, error) {
	var pods corev1.PodList
	if err := m.Client.List(ctx, &pods); err != nil {
		return false, err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil && len(p.Spec.ResourceClaims) > 0 {
			return true, nil
		}
	}
	return false, nil
}

// cluster lists what the planner reads.
func (m *Mover) cluster(ctx context.Context) (*defrag.Cluster, error) {
	var (
		classes resourceapi.DeviceClassList
		slices  resourceapi.ResourceSliceList
		claims  resourceapi.ResourceClaimList
		pods    corev1.PodList
		pdbs    policyv1.PodDisruptionBudgetList
		nodes   corev1.NodeList
	)
	for _, l := range []client.ObjectList{&classes, &slices, &claims, &pods, &pdbs, &nodes} {
		if err := m.Client.List(ctx, l); err != nil {
			return nil, err
		}
	}
	return &defrag.Cluster{Classes: classes.Items, Slices: slices.Items, Claims: claims.Items, Pods: pods.Items, PDBs: pdbs.Items, Nodes: nodes.Items}, nil
}

// carryOut moves each unit: a Workload admitted by the topology check through its check
// (Retry), every other pod through the Eviction API at the configured rate. It stops at
// the first refusal: the rest of the plan no longer holds.
func (m *Mover) carryOut(ctx context.Context, forWorkload string, moves []defrag.Move) (err error) {
	logger := klog.FromContext(ctx).WithName("defrag")
	// The nodes the evictions free are held until the evicted pods' replacements are
	// placed elsewhere: the scheduler still counts an evicted pod's claim as allocated until
	// it is released, and would put the replacement back next to it.
	var held []string
	owners := map[types.UID]string{}
	for _, mv := range moves {
		for _, p := range mv.Pods {
			if p.From != "" && !slices.Contains(held, p.From) {
				held = append(held, p.From)
			}
		}
	}
	if err := m.hold(ctx, held, forWorkload); err != nil {
		return err
	}
	defer func() {
		m.awaitReplacements(ctx, owners, held)
		if rerr := m.release(context.WithoutCancel(ctx), held); rerr != nil && err == nil {
			err = rerr
		}
	}()
	for _, mv := range moves {
		first := mv.Pods[0]
		ns, name, _ := strings.Cut(first.Pod, "/")
		var pod corev1.Pod
		if err := m.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &pod); err != nil {
			return fmt.Errorf("move %s: %w", mv.Unit, err)
		}
		if uid := pod.Labels[api.LabelWorkload]; uid != "" {
			if err := m.requeue(ctx, ns, types.UID(uid), forWorkload); err != nil {
				return fmt.Errorf("move %s: %w", mv.Unit, err)
			}
			requeued.Inc()
			logger.Info("Requeued a Workload to make room", "unit", mv.Unit, "for", forWorkload)
			continue
		}
		for _, p := range mv.Pods {
			if err := m.limiter.Wait(ctx); err != nil {
				return err
			}
			ns, name, _ := strings.Cut(p.Pod, "/")
			owner, controlled := ownerOf(ctx, m.Client, ns, name)
			ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
			target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
			if err := m.Client.SubResource("eviction").Create(ctx, target, ev); err != nil {
				evictions.WithLabelValues("refused").Inc()
				if apierrors.IsTooManyRequests(err) || apierrors.IsNotFound(err) {
					logger.Info("Eviction refused; the rest of the plan is dropped", "pod", p.Pod, "err", err)
					return nil
				}
				return fmt.Errorf("evicting pod %s: %w", p.Pod, err)
			}
			evictions.WithLabelValues("evicted").Inc()
			m.remember(forWorkload, owner)
			if controlled {
				owners[owner] = p.Pod
			}
			logger.Info("Evicted to make room", "pod", p.Pod, "from", p.From, "plannedTo", p.To, "for", forWorkload)
		}
	}
	return nil
}

// unmovable says why the controller cannot carry a move out ("" when it can): a Kueue gang
// moves only through the topology check, so its pods must carry the Workload UID it set.
func (m *Mover) unmovable(ctx context.Context, moves []defrag.Move) string {
	for _, mv := range moves {
		if !strings.HasPrefix(mv.Unit, "workload ") {
			continue
		}
		ns, name, _ := strings.Cut(mv.Pods[0].Pod, "/")
		var pod corev1.Pod
		if err := m.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &pod); err != nil {
			return fmt.Sprintf("move %s: %v", mv.Unit, err)
		}
		if pod.Labels[api.LabelWorkload] == "" {
			return fmt.Sprintf("move %s: a Kueue gang the topology check did not admit (no %s label) cannot be moved whole", mv.Unit, api.LabelWorkload)
		}
	}
	return ""
}

// requeue sets the gpudra.dev/topology check of the Workload with the UID to Retry: Kueue
// evicts its pods together and queues it again.
func (m *Mover) requeue(ctx context.Context, ns string, uid types.UID, forWorkload string) error {
	checks, err := m.ourChecks(ctx)
	if err != nil {
		return err
	}
	var list kueue.WorkloadList
	if err := m.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return err
	}
	for k := range list.Items {
		wl := &list.Items[k]
		if wl.UID != uid {
			continue
		}
		for i := range wl.Status.AdmissionChecks {
			s := &wl.Status.AdmissionChecks[i]
			if checks[string(s.Name)] {
				s.State = kueue.CheckStateRetry
				s.Message = "moved by defragmentation to make room for workload " + forWorkload
				s.LastTransitionTime = metav1.NewTime(m.now())
				return m.Client.Status().Update(ctx, wl)
			}
		}
		return fmt.Errorf("workload %s/%s has no gpudra.dev/topology check", ns, wl.Name)
	}
	return fmt.Errorf("no Workload with UID %s in namespace %s", uid, ns)
}

func (m *Mover) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// ownerOf is what replaces the pod when it is evicted: its controller's UID (controlled),
// else the pod's own.
func ownerOf(ctx context.Context, c client.Client, ns, name string) (uid types.UID, controlled bool) {
	var pod corev1.Pod
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &pod); err != nil {
		return "", false
	}
	if ref := metav1.GetControllerOf(&pod); ref != nil {
		return ref.UID, true
	}
	return pod.UID, false
}

func (m *Mover) remember(forWorkload string, owner types.UID) {
	if owner == "" {
		return
	}
	if m.moved == nil {
		m.moved = map[string]map[types.UID]bool{}
	}
	if m.moved[forWorkload] == nil {
		m.moved[forWorkload] = map[types.UID]bool{}
	}
	m.moved[forWorkload][owner] = true
}

// movedBefore is a pod of moves whose owner was moved for forWorkload already ("" if none).
func (m *Mover) movedBefore(ctx context.Context, forWorkload string, moves []defrag.Move) string {
	done := m.moved[forWorkload]
	if len(done) == 0 {
		return ""
	}
	for _, mv := range moves {
		for _, p := range mv.Pods {
			ns, name, _ := strings.Cut(p.Pod, "/")
			if owner, _ := ownerOf(ctx, m.Client, ns, name); done[owner] {
				return p.Pod
			}
		}
	}
	return ""
}

// forgetAdmitted drops what was moved for Workloads no longer waiting.
func (m *Mover) forgetAdmitted(waiting []*kueue.Workload) {
	still := map[string]bool{}
	for _, wl := range waiting {
		still[wl.Namespace+"/"+wl.Name] = true
	}
	for name := range m.moved {
		if !still[name] {
			delete(m.moved, name)
		}
	}
}

func (m *Mover) holdTimeout() time.Duration {
	if m.HoldTimeout <= 0 {
		return 2 * time.Minute
	}
	return m.HoldTimeout
}

// hold taints nodes NoSchedule with TaintDefragHold for forWorkload.
func (m *Mover) hold(ctx context.Context, nodes []string, forWorkload string) error {
	value := strings.ReplaceAll(forWorkload, "/", ".")
	for _, name := range nodes {
		var node corev1.Node
		if err := m.Client.Get(ctx, types.NamespacedName{Name: name}, &node); err != nil {
			return fmt.Errorf("hold node %s: %w", name, err)
		}
		if slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == api.TaintDefragHold }) {
			continue
		}
		patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: api.TaintDefragHold, Value: value, Effect: corev1.TaintEffectNoSchedule})
		if err := m.Client.Patch(ctx, &node, patch); err != nil {
			return fmt.Errorf("hold node %s: %w", name, err)
		}
	}
	return nil
}

// release removes TaintDefragHold from nodes (every node when nil).
func (m *Mover) release(ctx context.Context, nodes []string) error {
	var list corev1.NodeList
	if err := m.Client.List(ctx, &list); err != nil {
		return err
	}
	var errs []error
	for k := range list.Items {
		node := &list.Items[k]
		if nodes != nil && !slices.Contains(nodes, node.Name) {
			continue
		}
		if !slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == api.TaintDefragHold }) {
			continue
		}
		patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
		node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == api.TaintDefragHold })
		if err := m.Client.Patch(ctx, node, patch); err != nil {
			errs = append(errs, fmt.Errorf("release node %s: %w", node.Name, err))
		}
	}
	return errors.Join(errs...)
}

// awaitReplacements waits, at most HoldTimeout, until every owner has a pod placed on a
// node other than the held ones.
func (m *Mover) awaitReplacements(ctx context.Context, owners map[types.UID]string, held []string) {
	if len(owners) == 0 {
		return
	}
	deadline := time.Now().Add(m.holdTimeout())
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var pods corev1.PodList
		if err := m.Client.List(ctx, &pods); err == nil {
			placed := map[types.UID]bool{}
			for _, p := range pods.Items {
				ref := metav1.GetControllerOf(&p)
				if ref == nil || p.DeletionTimestamp != nil || p.Spec.NodeName == "" || slices.Contains(held, p.Spec.NodeName) {
					continue
				}
				placed[ref.UID] = true
			}
			all := true
			for uid := range owners {
				all = all && placed[uid]
			}
			if all {
				return
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

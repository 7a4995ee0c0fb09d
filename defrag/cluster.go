package defrag

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// Cluster is what the planner reads, as listed from the API server (or made by a
// simulation). Nodes are optional: without them the pods' node selectors and the nodes'
// taints are not checked, and a pending workload's network constraints see one domain.
type Cluster struct {
	Classes []resourceapi.DeviceClass
	Slices  []resourceapi.ResourceSlice
	Claims  []resourceapi.ResourceClaim
	Pods    []corev1.Pod
	PDBs    []policyv1.PodDisruptionBudget
	Nodes   []corev1.Node
}

// Kueue's labels that tie pods to one Workload.
const (
	labelKueuePodGroup = "kueue.x-k8s.io/pod-group-name"
	labelKueueQueue    = "kueue.x-k8s.io/queue-name"
)

// unit is what moves at once: one pod, or every pod of a Kueue Workload (a gang is evicted
// and requeued whole, never pod by pod).
type unit struct {
	// name is "pod NS/NAME" or "workload NS/KEY".
	name string
	pods []*runningPod
	// why is the reason it may not move ("" when it may).
	why string
	// pdbs are the PodDisruptionBudgets that cover its pods, with how many of them each covers.
	pdbs map[types.NamespacedName]int
}

// runningPod is a pod on a node and the allocated claims that are its own (made from its
// templates, or by kube-scheduler for its extended resources), which move with it.
type runningPod struct {
	pod    *corev1.Pod
	node   string
	claims []*resourceapi.ResourceClaim
}

func (p *runningPod) key() string { return p.pod.Namespace + "/" + p.pod.Name }

// gpuPods are the units of the cluster's running pods that hold gpudra devices, sorted by name.
func gpuPods(c *Cluster, v *view) []*unit {
	claims := map[types.NamespacedName]*resourceapi.ResourceClaim{}
	for k := range c.Claims {
		cl := &c.Claims[k]
		if cl.Status.Allocation != nil {
			claims[types.NamespacedName{Namespace: cl.Namespace, Name: cl.Name}] = cl
		}
	}
	units := map[string]*unit{}
	for k := range c.Pods {
		p := &c.Pods[k]
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		rp := &runningPod{pod: p, node: p.Spec.NodeName}
		var why []string
		for i := range p.Spec.ResourceClaims {
			pc := &p.Spec.ResourceClaims[i]
			name, _, err := resourceclaim.Name(p, pc)
			if err != nil || name == nil {
				continue
			}
			cl := claims[types.NamespacedName{Namespace: p.Namespace, Name: *name}]
			if cl == nil || !holdsGPUs(cl, v) {
				continue
			}
			if pc.ResourceClaimName != nil {
				why = append(why, fmt.Sprintf("uses the shared ResourceClaim %s, which does not move with it", *name))
				continue
			}
			rp.claims = append(rp.claims, cl)
		}
		if s := p.Status.ExtendedResourceClaimStatus; s != nil {
			if cl := claims[types.NamespacedName{Namespace: p.Namespace, Name: s.ResourceClaimName}]; cl != nil && holdsGPUs(cl, v) {
				rp.claims = append(rp.claims, cl)
			}
		}
		if len(rp.claims) == 0 && len(why) == 0 {
			continue // holds no GPU: nothing to gain by moving it
		}
		key, gang := unitKey(p)
		u := units[key]
		if u == nil {
			u = &unit{name: key, pdbs: map[types.NamespacedName]int{}}
			units[key] = u
		}
		u.pods = append(u.pods, rp)
		if p.Labels[api.LabelMovable] != "true" {
			why = append(why, fmt.Sprintf("has no label %s=\"true\"", api.LabelMovable))
		}
		if len(why) > 0 && u.why == "" {
			u.why = fmt.Sprintf("pod %s %s", rp.key(), strings.Join(why, " and "))
			if gang {
				u.why += " (its Workload moves only as a whole)"
			}
		}
	}
	out := make([]*unit, 0, len(units))
	for _, u := range units {
		slices.SortFunc(u.pods, func(a, b *runningPod) int { return strings.Compare(a.key(), b.key()) })
		coverPDBs(u, c.PDBs)
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b *unit) int { return strings.Compare(a.name, b.name) })
	return out
}

// unitKey names the unit a pod moves in, and whether that is a Kueue Workload: the
// Workload UID the admission check labels its pods with, Kueue's pod group, or the owner
// of a pod Kueue queued; otherwise the pod alone.
func unitKey(p *corev1.Pod) (string, bool) {
	switch {
	case p.Labels[api.LabelWorkload] != "":
		return "workload " + p.Namespace + "/" + p.Labels[api.LabelWorkload], true
	case p.Labels[labelKueuePodGroup] != "":
		return "workload " + p.Namespace + "/" + p.Labels[labelKueuePodGroup], true
	case p.Labels[labelKueueQueue] != "":
		if o := metav1.GetControllerOf(p); o != nil {
			return "workload " + p.Namespace + "/" + strings.ToLower(o.Kind) + "/" + o.Name, true
		}
	}
	return "pod " + p.Namespace + "/" + p.Name, false
}

// holdsGPUs: the claim's allocation holds a gpudra device the view knows.
func holdsGPUs(cl *resourceapi.ResourceClaim, v *view) bool {
	for _, r := range cl.Status.Allocation.Devices.Results {
		if r.Driver != api.DriverName {
			continue
		}
		if _, ok := v.devices[structuredID(r)]; ok {
			return true
		}
	}
	return false
}

// coverPDBs records the budgets that select the unit's pods; a budget that allows fewer
// disruptions than the pods it covers keeps the unit in place.
func coverPDBs(u *unit, pdbs []policyv1.PodDisruptionBudget) {
	for k := range pdbs {
		b := &pdbs[k]
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil || sel.Empty() && b.Spec.Selector == nil {
			continue
		}
		key := types.NamespacedName{Namespace: b.Namespace, Name: b.Name}
		for _, p := range u.pods {
			if p.pod.Namespace == b.Namespace && sel.Matches(labels.Set(p.pod.Labels)) {
				u.pdbs[key]++
			}
		}
		if n := u.pdbs[key]; n > 0 && int(b.Status.DisruptionsAllowed) < n && u.why == "" {
			u.why = fmt.Sprintf("PodDisruptionBudget %s allows %d disruptions, moving %s takes %d", key, b.Status.DisruptionsAllowed, u.name, n)
		}
	}
}

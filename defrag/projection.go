package defrag

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/driver/allocation"
)

// projection is the cluster as a plan leaves it: the allocator's state and the GPU view,
// changed together.
type projection struct {
	st    *allocation.State
	v     *view
	nodes map[string]*corev1.Node
}

func (p *projection) clone() *projection {
	return &projection{st: p.st.Clone(), v: p.v.clone(), nodes: p.nodes}
}

// evict takes the unit's claims off the devices.
func (p *projection) evict(u *unit) {
	for _, rp := range u.pods {
		for _, cl := range rp.claims {
			p.st.Release(cl.Status.Allocation)
			p.v.apply(cl.Status.Allocation, -1)
		}
	}
}

// commit records allocation results as in use.
func (p *projection) commit(results []resourceapi.AllocationResult) {
	for k := range results {
		p.st.Commit(&results[k])
		p.v.apply(&results[k], 1)
	}
}

// PodMove is one evicted pod and where it runs again in the plan's simulation.
type PodMove struct {
	Pod  string `json:"pod"`
	From string `json:"from"`
	To   string `json:"to"`
	// Devices are the devices the allocator gives it there.
	Devices []string `json:"devices"`
	// Allocations are the allocator's results for the pod's claims there, in the order of
	// its claims: what a simulation applies to carry the move out.
	Allocations []resourceapi.AllocationResult `json:"-"`
}

// errNowhere: a pod of the unit fits on no node.
var errNowhere = errors.New("fits on no node")

// rerun places the unit's pods again (all or none), on the fullest nodes first so that
// whole free GPUs stay whole, and says where each went.
func (p *projection) rerun(ctx context.Context, u *unit) ([]PodMove, []resourceapi.AllocationResult, error) {
	var out []PodMove
	var all []resourceapi.AllocationResult
	for _, rp := range u.pods {
		claims := make([]*resourceapi.ResourceClaim, len(rp.claims))
		for k, cl := range rp.claims {
			c := &resourceapi.ResourceClaim{Spec: *cl.Spec.DeepCopy()}
			c.Namespace, c.Name = cl.Namespace, cl.Name+"-again"
			c.UID = types.UID("again-" + string(cl.UID))
			claims[k] = c
		}
		node, results, err := p.placeOn(ctx, rp.pod, p.fullestFirst(), claims)
		if err != nil {
			return nil, nil, err
		}
		if node == "" {
			return nil, nil, fmt.Errorf("pod %s %w", rp.key(), errNowhere)
		}
		all = append(all, results...)
		var devices []string
		for _, r := range results {
			devices = append(devices, allocation.Devices(r)...)
		}
		out = append(out, PodMove{Pod: rp.key(), From: rp.node, To: node, Devices: devices, Allocations: results})
	}
	return out, all, nil
}

// placeOn allocates the claims on the first of the nodes the pod may run on, committing them.
func (p *projection) placeOn(ctx context.Context, pod *corev1.Pod, nodes []string, claims []*resourceapi.ResourceClaim) (string, []resourceapi.AllocationResult, error) {
	for _, n := range nodes {
		if pod != nil && !p.admits(n, pod) {
			continue
		}
		results, err := p.st.Allocate(ctx, n, claims...)
		if errors.Is(err, allocation.ErrUnsatisfiable) {
			continue
		}
		if err != nil {
			return "", nil, err
		}
		p.commit(results)
		return n, results, nil
	}
	return "", nil, nil
}

// admits: the pod's node selector and required node affinity match the node, and it
// tolerates the node's NoSchedule and NoExecute taints. A node the planner has no object
// for admits every pod.
func (p *projection) admits(name string, pod *corev1.Pod) bool {
	n := p.nodes[name]
	if n == nil {
		return true
	}
	if ok, _ := nodeaffinity.GetRequiredNodeAffinity(pod).Match(n); !ok {
		return false
	}
	_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), n.Spec.Taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, false)
	return !untolerated
}

// fullestFirst orders the nodes by how few whole GPUs they have free, then by name.
func (p *projection) fullestFirst() []string {
	nodes := p.v.nodeNames()
	free := make(map[string]int, len(nodes))
	for _, n := range nodes {
		free[n] = p.v.wholeFree(n)
	}
	slices.SortStableFunc(nodes, func(a, b string) int { return free[a] - free[b] })
	return nodes
}

// moveNames lists the units' names.
func moveNames(units []*unit) string {
	names := make([]string, len(units))
	for k, u := range units {
		names[k] = u.name
	}
	return strings.Join(names, ", ")
}

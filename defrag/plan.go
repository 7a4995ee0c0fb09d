package defrag

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/queueing/gang"
	"github.com/gpudra/gpudra/topology"
	"github.com/gpudra/gpudra/topology/placement"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// DefaultMaxEvictions bounds a plan's evictions when the goal names no bound.
const DefaultMaxEvictions = 16

// maxTargets bounds how many target nodes the planner simulates for a goal on one node.
const maxTargets = 64

// Goal is what a plan frees. Exactly one of FreeGPUs, FreeNode and Workload is set.
type Goal struct {
	// FreeGPUs asks for this many whole GPUs free on one node (what a pod of that many
	// GPUs needs).
	FreeGPUs int
	// FreeNode asks for one node with all its GPUs free.
	FreeNode bool
	// Workload asks for room for a pending gang.
	Workload *Workload
	// MaxEvictions bounds the pods a plan evicts (DefaultMaxEvictions when 0).
	MaxEvictions int
}

// Workload is a pending gang: its pod sets as the admission check reads them.
type Workload struct {
	Name    string
	PodSets []gang.PodSet
}

// Validate checks the goal, naming the field and the accepted values.
func (g Goal) Validate() error {
	set := 0
	if g.FreeGPUs != 0 {
		set++
	}
	if g.FreeNode {
		set++
	}
	if g.Workload != nil {
		set++
	}
	switch {
	case set != 1:
		return fmt.Errorf("goal: exactly one of freeGPUs, freeNode and workload is accepted, got %d", set)
	case g.FreeGPUs < 0:
		return fmt.Errorf("goal.freeGPUs %d: must be at least 1", g.FreeGPUs)
	case g.MaxEvictions < 0:
		return fmt.Errorf("goal.maxEvictions %d: must be at least 1 (0 for the default, %d)", g.MaxEvictions, DefaultMaxEvictions)
	case g.Workload != nil && len(g.Workload.PodSets) == 0:
		return fmt.Errorf("goal.workload %s: has no pod sets", g.Workload.Name)
	}
	return nil
}

func (g Goal) String() string {
	switch {
	case g.FreeNode:
		return "free a whole node"
	case g.Workload != nil:
		return "room for workload " + g.Workload.Name
	default:
		return fmt.Sprintf("free %d whole GPUs on one node", g.FreeGPUs)
	}
}

// Options tune the planner.
type Options struct {
	// TypicalPods are the pod shapes the fragmentation measure uses (DefaultTypicalPods
	// when empty).
	TypicalPods []placement.TypicalPod
	// Labels are the node labels that place nodes in the network, for a pending
	// workload's required topology (topology.DefaultLabelKeys when empty).
	Labels topology.LabelKeys
}

// Result is a plan and the fragmentation before and after it.
type Result struct {
	Goal   string  `json:"goal"`
	Before Report  `json:"before"`
	After  *Report `json:"after,omitempty"`
	// Found says the goal is met: by the moves, or already (no moves).
	Found bool `json:"found"`
	// Target is the node the plan frees GPUs on (goals on one node).
	Target string `json:"target,omitempty"`
	Moves  []Move `json:"moves,omitempty"`
	// Evictions counts the pods the moves evict.
	Evictions int `json:"evictions"`
	// Reason says why no plan was found.
	Reason string `json:"reason,omitempty"`
	// Unmovable are the pods holding GPUs that no plan may move, and why.
	Unmovable []string `json:"unmovable,omitempty"`
}

// Move is one unit moved: a pod, or a Kueue Workload's whole gang.
type Move struct {
	// Unit is "pod NS/NAME" or "workload NS/KEY".
	Unit string    `json:"unit"`
	Pods []PodMove `json:"pods"`
}

// planner holds one planning run's inputs.
type planner struct {
	base    *projection
	units   []*unit
	byNode  map[string][]*unit
	budgets map[types.NamespacedName]int
	// occupants counts the allocation results on each GPU, by node and GPU index, of every
	// allocated claim: more than the units' means a claim no running pod owns holds it.
	occupants map[string][]int
	typical   []placement.TypicalPod
	labels    topology.LabelKeys
	max       int
	cluster   *Cluster
}

// Plan finds the smallest set of moves (greedy, at most goal.MaxEvictions pods, the same
// answer for the same input) that meets the goal, every move checked with the real
// allocator: the goal's devices are allocated first, then every evicted pod is placed
// again, or the plan is not proposed. Only pods labelled gpudra.dev/movable=true move, a
// Kueue Workload's pods only all together, and never beyond what PodDisruptionBudgets allow.
func Plan(ctx context.Context, c *Cluster, goal Goal, opts Options) (*Result, error) {
	if err := goal.Validate(); err != nil {
		return nil, err
	}
	p := newPlanner(c, goal, opts)
	res := &Result{Goal: goal.String(), Before: p.base.v.report(p.typical)}
	for _, u := range p.units {
		if u.why != "" {
			res.Unmovable = append(res.Unmovable, u.why)
		}
	}
	var err error
	if goal.Workload != nil {
		err = p.forWorkload(ctx, goal.Workload, res)
	} else {
		err = p.onOneNode(ctx, goal, res)
	}
	return res, err
}

func newPlanner(c *Cluster, goal Goal, opts Options) *planner {
	slices := c.Slices
	v := newView(slices)
	st, _ := allocation.FromCluster(c.Classes, c.Slices, c.Claims)
	occupants := map[string][]int{}
	for k := range c.Claims {
		a := c.Claims[k].Status.Allocation
		if a == nil {
			continue
		}
		v.apply(a, 1)
		for _, r := range a.Devices.Results {
			d, ok := v.devices[structuredID(r)]
			if !ok {
				continue
			}
			for _, i := range d.gpus {
				if i < 0 {
					continue
				}
				for len(occupants[d.node]) <= i {
					occupants[d.node] = append(occupants[d.node], 0)
				}
				occupants[d.node][i]++
			}
		}
	}
	nodes := map[string]*corev1.Node{}
	for k := range c.Nodes {
		nodes[c.Nodes[k].Name] = &c.Nodes[k]
	}
	p := &planner{base: &projection{st: st, v: v, nodes: nodes}, occupants: occupants, cluster: c, typical: opts.TypicalPods, labels: opts.Labels, max: goal.MaxEvictions}
	if len(p.typical) == 0 {
		p.typical = DefaultTypicalPods()
	}
	if p.labels == (topology.LabelKeys{}) {
		p.labels = topology.DefaultLabelKeys
	}
	if p.max == 0 {
		p.max = DefaultMaxEvictions
	}
	p.units = gpuPods(c, v)
	p.byNode = map[string][]*unit{}
	for _, u := range p.units {
		seen := map[string]bool{}
		for _, rp := range u.pods {
			if !seen[rp.node] {
				seen[rp.node] = true
				p.byNode[rp.node] = append(p.byNode[rp.node], u)
			}
		}
	}
	p.budgets = map[types.NamespacedName]int{}
	for k := range c.PDBs {
		b := &c.PDBs[k]
		p.budgets[types.NamespacedName{Namespace: b.Namespace, Name: b.Name}] = int(b.Status.DisruptionsAllowed)
	}
	return p
}

// candidate is a target node and the units to evict from it.
type candidate struct {
	node  string
	units []*unit
	pods  int
}

// onOneNode frees goal.FreeGPUs (or every GPU, FreeNode) on one node: the cheapest
// targets first, each checked by allocating the freed GPUs and placing every evicted pod
// again.
func (p *planner) onOneNode(ctx context.Context, goal Goal, res *Result) error {
	var cands []candidate
	var why []string
	for _, node := range p.base.v.nodeNames() {
		need := goal.FreeGPUs
		if goal.FreeNode {
			need = len(p.base.v.nodes[node])
		}
		if need > len(p.base.v.nodes[node]) {
			continue
		}
		if p.base.v.wholeFree(node) >= need {
			res.Found, res.Target = true, node
			after := res.Before
			res.After = &after
			return nil
		}
		units, reason := p.freeing(p.base, node, need, nil)
		if units == nil {
			why = append(why, fmt.Sprintf("%s: %s", node, reason))
			continue
		}
		cands = append(cands, candidate{node: node, units: units, pods: countPods(units)})
	}
	slices.SortStableFunc(cands, func(a, b candidate) int { return cmp.Compare(a.pods, b.pods) })
	for k, c := range cands {
		if k == maxTargets {
			break
		}
		need := goal.FreeGPUs
		if goal.FreeNode {
			need = len(p.base.v.nodes[c.node])
		}
		after, moves, err := p.simulate(ctx, c.units, func(ctx context.Context, pr *projection) error {
			return hold(ctx, pr, c.node, need)
		})
		var nowhere *nowhereError
		if errors.As(err, &nowhere) {
			why = append(why, fmt.Sprintf("%s: moving %s: %v", c.node, moveNames(c.units), err))
			continue
		}
		if err != nil {
			return err
		}
		res.Found, res.Target, res.Moves, res.Evictions = true, c.node, moves, c.pods
		r := after.report(p.typical)
		res.After = &r
		return nil
	}
	if len(cands) == 0 && len(why) == 0 {
		if goal.FreeNode {
			res.Reason = "no node has GPUs"
		} else {
			res.Reason = fmt.Sprintf("no node has %d GPUs", goal.FreeGPUs)
		}
		return nil
	}
	res.Reason = fmt.Sprintf("no plan within %d evictions: %s", p.max, firstReasons(why))
	return nil
}

// nowhereError: a move's pods, or the goal itself, cannot be placed in the simulation.
type nowhereError struct{ err error }

func (e *nowhereError) Error() string { return e.err.Error() }

// simulate evicts the units, places the goal (place), then every evicted pod again; it
// returns the GPUs as the moves leave them (without the goal's) and the moves, or a
// nowhereError.
func (p *planner) simulate(ctx context.Context, units []*unit, place func(context.Context, *projection) error) (*view, []Move, error) {
	pr := p.base.clone()
	after := p.base.v.clone()
	for _, u := range units {
		pr.evict(u)
		for _, rp := range u.pods {
			for _, cl := range rp.claims {
				after.apply(cl.Status.Allocation, -1)
			}
		}
	}
	if err := place(ctx, pr); err != nil {
		return nil, nil, err
	}
	var moves []Move
	for _, u := range units {
		pods, results, err := pr.rerun(ctx, u)
		if errors.Is(err, errNowhere) {
			return nil, nil, &nowhereError{err}
		}
		if err != nil {
			return nil, nil, err
		}
		for k := range results {
			after.apply(&results[k], 1)
		}
		moves = append(moves, Move{Unit: u.name, Pods: pods})
	}
	return after, moves, nil
}

// hold allocates need whole GPUs on the node, as a pod asking for them would get them.
func hold(ctx context.Context, pr *projection, node string, need int) error {
	claim := &resourceapi.ResourceClaim{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
		Name: "gpus", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: api.DeviceClassGPU, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(need)},
	}}}}}
	claim.Namespace, claim.Name, claim.UID = "defrag", "goal", "defrag-goal"
	n, _, err := pr.placeOn(ctx, nil, []string{node}, []*resourceapi.ResourceClaim{claim})
	if err != nil {
		return err
	}
	if n == "" {
		return &nowhereError{fmt.Errorf("the allocator does not give %d whole GPUs on %s", need, node)}
	}
	return nil
}

func countPods(units []*unit) int {
	n := 0
	for _, u := range units {
		n += len(u.pods)
	}
	return n
}

// occupied counts the allocation results on GPU i of the node.
func (p *planner) occupied(node string, i int) int {
	if o := p.occupants[node]; i < len(o) {
		return o[i]
	}
	return 0
}

// shownReasons bounds the reasons a Result gives, one per node or attempt.
const shownReasons = 8

// firstReasons joins the first reasons, saying how many more there are.
func firstReasons(why []string) string {
	if len(why) <= shownReasons {
		return strings.Join(why, "; ")
	}
	return fmt.Sprintf("%s; and %d more", strings.Join(why[:shownReasons], "; "), len(why)-shownReasons)
}

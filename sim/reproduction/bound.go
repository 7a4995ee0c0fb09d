package reproduction

import (
	"math/bits"
	"slices"

	"github.com/gpudra/gpudra/topology/placement"
)

// UpperBoundName names the bound in tables and curves, beside the policies.
const UpperBoundName = "upper bound"

// maxBoundModels bounds the GPU models the capacity bound tells apart: it looks at every
// subset of them for each arrival. With more, all GPUs count as one model (still a bound,
// a looser one).
const maxBoundModels = 12

// UpperBound is, for each prefix arrivals[:k+1], the most GPU milli that any placement of
// those pods on the nodes could hold at once: every policy, online or not, in any mode,
// allocates at most Events[k].Allocated after the k-th arrival. Since nothing leaves, what a
// replay holds after k arrivals is a subset of them placed feasibly, so anything that is at
// least the best feasible subset's GPU demand bounds it. The bound is the least of three
// relaxations, each of which keeps every feasible placement feasible and drops rules:
//
//   - Capacity by model (a max flow, as a min cut): pods are poured into GPU models, each
//     model holding at most its nodes' GPU milli; a pod may go to a model it accepts whose
//     nodes could take it alone (enough GPUs, CPU and memory on one empty node). This drops
//     which GPU and which node within a model, per-GPU packing and the CPU and memory
//     already used, so a feasible placement is one such pouring and its GPU demand is at
//     most the max flow. With no model at all (the empty cut) it is the arrived demand the
//     cluster could ever take; with every model, the GPU capacity.
//   - CPU (a fractional knapsack): GPU pods take CPU on GPU nodes, so the pods a placement
//     holds fit, in CPU, in the GPU nodes' CPU summed. Dropping the split into nodes and
//     letting a pod be taken in part only widens the choice; the greedy by GPU milli per
//     milli-CPU is that relaxation's optimum. CPU-only pods are left out: they add no GPU
//     demand, and leaving them out is one of the relaxation's choices.
//   - Memory: the same knapsack with memory.
//
// The bound is the optimum in simple cases (the tests show which: the capacity or the arrived
// demand reached, pods bound to a model, CPU or memory the limit on one node). It cannot see
// per-GPU packing (two 0.6-GPU shares on one GPU) nor per-node CPU and memory. Arrived is the
// cumulative GPU demand, as in Replay.
func UpperBound(nodes []placement.NodeSpec, arrivals []placement.Pod) []Event {
	capacity := newCapacityCut(nodes)
	var cpu, mem knapsack
	var cpuCap, memCap int64
	for _, n := range nodes {
		if n.GPUs > 0 {
			cpuCap += n.CPU
			memCap += n.Memory
		}
	}
	cpu.init(arrivals, func(p *placement.Pod) int64 { return p.CPU }, cpuCap)
	mem.init(arrivals, func(p *placement.Pod) int64 { return p.Memory }, memCap)
	out := make([]Event, len(arrivals))
	var arrived int64
	for k := range arrivals {
		p := &arrivals[k]
		arrived += p.Demand()
		if p.Demand() > 0 {
			capacity.add(p)
			cpu.add(k)
			mem.add(k)
		}
		out[k] = Event{Arrived: arrived, Allocated: min(capacity.bound(), cpu.bound(), mem.bound())}
	}
	return out
}

// capacityCut keeps, for every set M of GPU models, the cut capacity(M) + the demand of
// the pods some of whose models lie outside M; the least over M is the max flow of pods
// into models (max-flow min-cut on the bipartite graph pods → models → sink).
type capacityCut struct {
	nodes  []placement.NodeSpec
	models []string
	cut    []int64
}

func newCapacityCut(nodes []placement.NodeSpec) *capacityCut {
	c := &capacityCut{nodes: nodes}
	for _, n := range nodes {
		if n.GPUs > 0 && !slices.Contains(c.models, n.Model) {
			c.models = append(c.models, n.Model)
		}
	}
	if len(c.models) > maxBoundModels {
		c.models = nil // one group: every GPU node's model counts as ""
	}
	groups := max(1, len(c.models))
	c.cut = make([]int64, 1<<groups)
	for _, n := range nodes {
		if n.GPUs == 0 {
			continue
		}
		g := c.group(n.Model)
		for m := range c.cut {
			if m&(1<<g) != 0 {
				c.cut[m] += int64(n.GPUs) * placement.MilliPerGPU
			}
		}
	}
	return c
}

func (c *capacityCut) group(model string) int {
	if c.models == nil {
		return 0
	}
	return slices.Index(c.models, model)
}

// add counts the pod's demand on every cut that leaves one of its groups outside M.
func (c *capacityCut) add(p *placement.Pod) {
	var mask int
	for _, n := range c.nodes {
		if n.GPUs >= p.GPUs && n.CPU >= p.CPU && n.Memory >= p.Memory && (len(p.Models) == 0 || slices.Contains(p.Models, n.Model)) {
			mask |= 1 << c.group(n.Model)
		}
	}
	if mask == 0 {
		return // no node could ever take it
	}
	for m := range c.cut {
		if mask&^m != 0 {
			c.cut[m] += p.Demand()
		}
	}
}

func (c *capacityCut) bound() int64 { return slices.Min(c.cut) }

// knapsack is the fractional knapsack of the arrived GPU pods' demand in one resource,
// kept in Fenwick trees over the pods in order of demand per unit of the resource, so that
// each arrival costs a logarithm rather than a sort.
type knapsack struct {
	capacity      int64
	rank          []int // arrival index → 1-based position in the greedy order
	weight, value []int64
	byRank        []int // position → arrival index
	w, v          []int64
	items         []placement.Pod
	size          func(*placement.Pod) int64
}

func (s *knapsack) init(arrivals []placement.Pod, size func(*placement.Pod) int64, capacity int64) {
	s.capacity, s.items, s.size = capacity, arrivals, size
	order := make([]int, 0, len(arrivals))
	for k := range arrivals {
		if arrivals[k].Demand() > 0 {
			order = append(order, k)
		}
	}
	// Most demand per unit first: d_i/w_i > d_j/w_j as d_i·w_j > d_j·w_i (demand ≤ 8000
	// and sizes ≤ 2^40 keep the products in int64); a size of 0 comes first.
	slices.SortStableFunc(order, func(i, j int) int {
		a := arrivals[i].Demand() * size(&arrivals[j])
		b := arrivals[j].Demand() * size(&arrivals[i])
		switch {
		case a > b:
			return -1
		case a < b:
			return 1
		}
		return 0
	})
	s.rank = make([]int, len(arrivals))
	s.byRank = make([]int, len(order)+1)
	for r, k := range order {
		s.rank[k] = r + 1
		s.byRank[r+1] = k
	}
	s.w = make([]int64, len(order)+1)
	s.v = make([]int64, len(order)+1)
}

func (s *knapsack) add(k int) {
	p := &s.items[k]
	for i := s.rank[k]; i < len(s.w); i += i & -i {
		s.w[i] += s.size(p)
		s.v[i] += p.Demand()
	}
}

// bound takes the added pods whole in greedy order while they fit and the next one in part
// (rounded up).
func (s *knapsack) bound() int64 {
	pos, used, value := 0, int64(0), int64(0)
	for step := 1 << bits.Len(uint(len(s.w)-1)); step > 0; step >>= 1 {
		if next := pos + step; next < len(s.w) && used+s.w[next] <= s.capacity {
			pos, used, value = next, used+s.w[next], value+s.v[next]
		}
	}
	// Position pos+1, if any, is an added pod that does not fit whole: with it the sum
	// passes the capacity (else the descent would have taken it), so its size is more than
	// the room left.
	if pos+1 < len(s.w) {
		p := &s.items[s.byRank[pos+1]]
		hi, lo := bits.Mul64(uint64(p.Demand()), uint64(s.capacity-used))
		q, r := bits.Div64(hi, lo, uint64(s.size(p)))
		if r > 0 {
			q++
		}
		value += int64(q)
	}
	return value
}

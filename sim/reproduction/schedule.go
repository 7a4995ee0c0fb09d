package reproduction

import (
	"math/rand"

	"github.com/gpudra/gpudra/topology/placement"
)

// Scheduler places pods on nodes one at a time with one policy, the way kube-scheduler
// runs a single Score plugin: filter the nodes that fit, score them, take the highest
// score (ties to the smallest rank, or at random for kube-scheduler's own selection).
// Scores are cached per node and pod shape until the node changes.
type Scheduler struct {
	Nodes     []*placement.Node
	Policy    placement.Policy
	behaviour Behaviour
	rand      *rand.Rand
	cache     [][]cached // by node, then shape id
	shapes    map[cacheKey]int
	nextStart int
}

type cacheKey struct {
	placement.Shape
	Memory int64
}

type cached struct {
	valid   bool
	version uint64
	choice  placement.Choice
}

// NewScheduler builds a scheduler over nodes. r breaks kube-scheduler's ties.
func NewScheduler(nodes []*placement.Node, policy placement.Policy, r *rand.Rand) *Scheduler {
	return &Scheduler{Nodes: nodes, Policy: policy, behaviour: BehaviourOf(policy), rand: r, cache: make([][]cached, len(nodes)), shapes: map[cacheKey]int{}}
}

// Candidate is a node a pod may go to and the policy's choice there.
type Candidate struct {
	Node int
	placement.Choice
}

// Best returns the policy's pick among the nodes that fit the pod and are not excluded,
// or ok=false when none fits.
func (s *Scheduler) Best(p *placement.Pod, exclude map[int]bool) (Candidate, bool) {
	key := cacheKey{Shape: placement.ShapeOf(p), Memory: p.Memory}
	id, ok := s.shapes[key]
	if !ok {
		id = len(s.shapes)
		s.shapes[key] = id
	}
	best := Candidate{Node: -1}
	ties := 0
	consider := func(k int) bool {
		n := s.Nodes[k]
		if exclude[k] || !n.Fits(p) {
			return false
		}
		c := s.score(k, n, p, id)
		switch {
		case best.Node < 0 || c.Score > best.Score:
			best, ties = Candidate{Node: k, Choice: c}, 1
		case c.Score == best.Score:
			if s.behaviour.Kube {
				// kube-scheduler's selectHost: reservoir sampling over the ties.
				ties++
				if s.rand.Intn(ties) == 0 {
					best = Candidate{Node: k, Choice: c}
				}
			} else if n.Rank < s.Nodes[best.Node].Rank {
				best = Candidate{Node: k, Choice: c}
			}
		}
		return true
	}
	if !s.behaviour.Kube {
		for k := range s.Nodes {
			consider(k)
		}
		return best, best.Node >= 0
	}
	// kube-scheduler scores only the first numFeasibleNodesToFind feasible nodes,
	// starting where the previous cycle stopped.
	want := numFeasibleNodesToFind(len(s.Nodes))
	found, processed := 0, 0
	for ; processed < len(s.Nodes) && found < want; processed++ {
		if consider((s.nextStart + processed) % len(s.Nodes)) {
			found++
		}
	}
	s.nextStart = (s.nextStart + processed) % len(s.Nodes)
	return best, best.Node >= 0
}

// numFeasibleNodesToFind is kube-scheduler's default percentageOfNodesToScore
// (adaptive: 50 % − nodes/125, at least 5 %, at least 100 nodes).
func numFeasibleNodesToFind(nodes int) int {
	if nodes < 100 {
		return nodes
	}
	pct := max(50-nodes/125, 5)
	return max(nodes*pct/100, 100)
}

func (s *Scheduler) score(k int, n *placement.Node, p *placement.Pod, id int) placement.Choice {
	if s.behaviour.Volatile {
		return s.Policy.Score(n, p)
	}
	if id >= len(s.cache[k]) {
		s.cache[k] = append(s.cache[k], make([]cached, id+1-len(s.cache[k]))...)
	}
	e := &s.cache[k][id]
	if e.valid && e.version == n.Version {
		return e.choice
	}
	c := s.Policy.Score(n, p)
	*e = cached{valid: true, version: n.Version, choice: c}
	return c
}

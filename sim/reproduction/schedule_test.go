package reproduction

import (
	"math/rand"
	"testing"

	"github.com/gpudra/gpudra/topology/placement"
)

func TestSchedulerBreaksTiesByRank(t *testing.T) {
	nodes := []*placement.Node{
		placement.NewNode(placement.NodeSpec{Name: "a", CPU: 8000, Memory: 100, GPUs: 1, Model: "T4"}, 2),
		placement.NewNode(placement.NodeSpec{Name: "b", CPU: 8000, Memory: 100, GPUs: 1, Model: "T4"}, 0),
		placement.NewNode(placement.NodeSpec{Name: "c", CPU: 8000, Memory: 100, GPUs: 1, Model: "P100"}, 1),
	}
	s := NewScheduler(nodes, DotProd{}, nil)
	p := &placement.Pod{Name: "p", CPU: 1000, GPUs: 1, GPUMilli: 500, Models: []string{"T4"}}
	c, ok := s.Best(p, nil)
	if !ok || nodes[c.Node].Name != "b" {
		t.Fatalf("got %+v, want node b (equal scores, smallest rank; c has the wrong model)", c)
	}
	if c, _ := s.Best(p, map[int]bool{1: true}); nodes[c.Node].Name != "a" {
		t.Fatalf("excluding b: got %s, want a", nodes[c.Node].Name)
	}
}

func TestSchedulerCachesUntilTheNodeChanges(t *testing.T) {
	n := placement.NewNode(placement.NodeSpec{Name: "a", CPU: 8000, Memory: 100, GPUs: 2, Model: "T4"}, 0)
	s := NewScheduler([]*placement.Node{n}, BestFit{}, nil)
	p := &placement.Pod{Name: "p", CPU: 1000, GPUs: 1, GPUMilli: 500}
	first, _ := s.Best(p, nil)
	if err := n.Place(p, first.GPUs); err != nil {
		t.Fatal(err)
	}
	second, _ := s.Best(p, nil)
	if second.Score <= first.Score || second.GPUs[0] != 0 {
		t.Fatalf("after placing, got %+v then %+v: the cached score must not survive the change", first, second)
	}
}

func TestKubeSchedulerScoresASampleOfNodes(t *testing.T) {
	if got := numFeasibleNodesToFind(1213); got != 1213*41/100 {
		t.Fatalf("1213 nodes: %d, want 41 %%", got)
	}
	if got := numFeasibleNodesToFind(150); got != 100 {
		t.Fatalf("150 nodes: %d, want the minimum of 100", got)
	}
	var nodes []*placement.Node
	for k := range 200 {
		nodes = append(nodes, placement.NewNode(placement.NodeSpec{Name: "n", CPU: 8000, Memory: 100, GPUs: 1, Model: "T4"}, k))
	}
	s := NewScheduler(nodes, LeastAllocated{}, rand.New(rand.NewSource(1)))
	p := &placement.Pod{Name: "p", CPU: 4000}
	if c, _ := s.Best(p, nil); c.Node >= 100 {
		t.Fatalf("first cycle chose node %d, want one of the first 100 it scores", c.Node)
	}
	if c, _ := s.Best(p, nil); c.Node < 100 {
		t.Fatalf("second cycle chose node %d, want one of the next 100", c.Node)
	}
}

// refuser refuses the first node it is offered.
type refuser struct{ refused bool }

func (r *refuser) Bind(n *placement.Node, p *placement.Pod, c placement.Choice) ([]int, error) {
	if !r.refused {
		r.refused = true
		return nil, ErrRefused
	}
	return c.GPUs, nil
}

func TestReplayFallsBackWhenTheAllocatorRefuses(t *testing.T) {
	nodes := testCluster(4)
	w := mustWorkload(t, 42, testPods(2, 500), nodes)
	w.Arrivals = w.Arrivals[:1]
	res, err := Replay(nodes, w, BestFit{}, &refuser{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Refused != 1 || res.Placed != 1 {
		t.Fatalf("got %+v, want one refusal and the pod placed on the next node", res)
	}
}

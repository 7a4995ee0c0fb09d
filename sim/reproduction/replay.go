package reproduction

import (
	"errors"
	"fmt"

	"github.com/gpudra/gpudra/topology/placement"
)

// Binder gives a pod the devices of the node the scheduler chose, the way the DRA
// allocator does in a cluster. It returns the GPU indices the pod got, or
// ErrRefused when the node cannot take the pod after all. A nil Binder trusts the
// policy's choice.
type Binder interface {
	Bind(node *placement.Node, p *placement.Pod, c placement.Choice) ([]int, error)
}

// ErrRefused is a Binder's answer when the devices do not fit.
var ErrRefused = errors.New("devices refused")

// Result is one replay: the curve and what happened to the pods.
type Result struct {
	Policy   string
	Seed     int64
	Events   []Event
	Curve    Curve
	Placed   int
	Failed   int
	Capacity int64
	// Refused counts nodes the policy chose whose devices the binder refused:
	// disagreements between the policy's accounting and the allocator.
	Refused int
	// Moved counts pods the binder put on other GPUs than the policy named.
	Moved int
}

// Replay runs one workload through one policy: one pod at a time, arrived demand
// counted before the attempt, failures never retried, nothing ever leaves.
func Replay(specs []placement.NodeSpec, w Workload, policy placement.Policy, binder Binder) (Result, error) {
	nodes := make([]*placement.Node, len(specs))
	var capacity int64
	for k, sp := range specs {
		nodes[k] = placement.NewNode(sp, w.Ranks[k])
		capacity += int64(sp.GPUs) * placement.MilliPerGPU
	}
	s := NewScheduler(nodes, policy, w.Rand)
	res := Result{Policy: policy.Name(), Seed: w.Seed, Capacity: capacity, Events: make([]Event, 0, len(w.Arrivals))}
	var allocated, arrived int64
	for k := range w.Arrivals {
		p := &w.Arrivals[k]
		arrived += p.Demand()
		placed, err := place(s, p, binder, &res)
		if err != nil {
			return res, err
		}
		if placed {
			allocated += p.Demand()
			res.Placed++
		} else {
			res.Failed++
		}
		res.Events = append(res.Events, Event{Allocated: allocated, Arrived: arrived})
	}
	res.Curve = NewCurve(res.Events, capacity)
	return res, nil
}

func place(s *Scheduler, p *placement.Pod, binder Binder, res *Result) (bool, error) {
	var exclude map[int]bool
	for {
		c, ok := s.Best(p, exclude)
		if !ok {
			return false, nil
		}
		n := s.Nodes[c.Node]
		gpus := c.GPUs
		if binder != nil {
			got, err := binder.Bind(n, p, c.Choice)
			if errors.Is(err, ErrRefused) {
				res.Refused++
				if exclude == nil {
					exclude = map[int]bool{}
				}
				exclude[c.Node] = true
				continue
			}
			if err != nil {
				return false, fmt.Errorf("pod %s on node %s: %w", p.Name, n.Name, err)
			}
			if !sameInts(got, gpus) {
				res.Moved++
			}
			gpus = got
		}
		return true, n.Place(p, gpus)
	}
}

func sameInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if a[k] != b[k] {
			return false
		}
	}
	return true
}

package sim

import (
	"context"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/gpudra/gpudra/sim/reproduction"
	"github.com/gpudra/gpudra/topology/placement"
)

// NoAllocator is the mode without the allocator: the policy's own accounting and GPU
// choice are trusted (fast, for exploring; equal to reproduction mode when the
// allocator never refuses).
const NoAllocator Mode = "none"

// Experiment is a grid of traces × modes × policies × seeds.
type Experiment struct {
	// Files holds the node list and the pod lists at its root (the embedded traces of
	// github.com/gpudra/gpudra/data/traces, or os.DirFS of a directory).
	Files    fs.FS
	Traces   []string
	Modes    []Mode
	Policies []string
	Seeds    []int64
	// Parallel is how many replays run at once (each is single-threaded).
	Parallel int
	// UpperBound adds, per trace, mode and seed, a run of policy
	// reproduction.UpperBoundName: the most GPU demand any placement of the seed's arrivals
	// could hold (the same in every mode).
	UpperBound bool
}

// Run is one replay's outcome.
type Run struct {
	Trace string
	Mode  Mode
	reproduction.Result
	Wall time.Duration
}

// Execute runs the grid; progress (if set) is called after each replay, serially.
func Execute(ctx context.Context, e Experiment, progress func(Run)) ([]Run, error) {
	nodes, err := reproduction.LoadNodesFrom(e.Files, reproduction.NodeListFile)
	if err != nil {
		return nil, err
	}
	type job struct {
		trace  string
		pods   []placement.Pod
		mode   Mode
		policy string
		seed   int64
	}
	var jobs []job
	for _, t := range e.Traces {
		pods, err := reproduction.LoadPodsFrom(e.Files, reproduction.PodListFile(t))
		if err != nil {
			return nil, err
		}
		for _, m := range e.Modes {
			for _, pol := range e.Policies {
				if _, err := reproduction.NewPolicy(pol, reproduction.Setup{}); err != nil {
					return nil, err
				}
				for _, s := range e.Seeds {
					jobs = append(jobs, job{t, pods, m, pol, s})
				}
			}
		}
	}
	runs := make([]Run, len(jobs))
	errs := make([]error, len(jobs))
	var mu sync.Mutex
	sem := make(chan struct{}, max(1, e.Parallel))
	var wg sync.WaitGroup
	for k, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if ctx.Err() != nil {
				errs[k] = ctx.Err()
				return
			}
			r, err := ReplayOne(ctx, nodes, j.pods, j.trace, j.mode, j.policy, j.seed)
			runs[k], errs[k] = r, err
			if err == nil && progress != nil {
				mu.Lock()
				progress(r)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return runs, err
		}
	}
	if !e.UpperBound {
		return runs, nil
	}
	for _, t := range e.Traces {
		pods, err := reproduction.LoadPodsFrom(e.Files, reproduction.PodListFile(t))
		if err != nil {
			return nil, err
		}
		for _, s := range e.Seeds {
			r, err := BoundRun(nodes, pods, t, s)
			if err != nil {
				return runs, err
			}
			for _, m := range e.Modes {
				r.Mode = m
				runs = append(runs, r)
			}
		}
	}
	return runs, nil
}

// BoundRun is the upper bound on a trace's seed as a run (see reproduction.UpperBound).
func BoundRun(nodes []placement.NodeSpec, pods []placement.Pod, trace string, seed int64) (Run, error) {
	start := time.Now()
	w, err := reproduction.NewWorkload(seed, pods, nodes)
	if err != nil {
		return Run{}, fmt.Errorf("%s/seed %d: %w", trace, seed, err)
	}
	var capacity int64
	for _, n := range nodes {
		capacity += int64(n.GPUs) * placement.MilliPerGPU
	}
	events := reproduction.UpperBound(nodes, w.Arrivals)
	res := reproduction.Result{Policy: reproduction.UpperBoundName, Seed: seed, Events: events, Curve: reproduction.NewCurve(events, capacity), Capacity: capacity}
	return Run{Trace: trace, Result: res, Wall: time.Since(start)}, nil
}

// ReplayOne replays one trace with one policy and seed in one mode.
func ReplayOne(ctx context.Context, nodes []placement.NodeSpec, pods []placement.Pod, trace string, mode Mode, policy string, seed int64) (Run, error) {
	start := time.Now()
	w, err := reproduction.NewWorkload(seed, pods, nodes)
	if err != nil {
		return Run{}, fmt.Errorf("%s/seed %d: %w", trace, seed, err)
	}
	pol, err := reproduction.NewPolicy(policy, reproduction.Setup{Typical: pods, Rand: w.Rand})
	if err != nil {
		return Run{}, err
	}
	var binder reproduction.Binder
	if mode != NoAllocator {
		a, err := NewAllocator(ctx, nodes, mode)
		if err != nil {
			return Run{}, err
		}
		binder = a
	}
	res, err := reproduction.Replay(nodes, w, pol, binder)
	if err != nil {
		return Run{}, fmt.Errorf("%s/%s/%s/seed %d: %w", trace, mode, policy, seed, err)
	}
	return Run{Trace: trace, Mode: mode, Result: res, Wall: time.Since(start)}, nil
}

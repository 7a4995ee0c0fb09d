package sim

import (
	"fmt"
	"hash/fnv"
	"math/rand"

	"github.com/gpudra/gpudra/sim/reproduction"
	"github.com/gpudra/gpudra/topology/placement"
)

// Data locality in the simulator: each GPU pod of a trace reads one of a few datasets (by a
// hash of its name), each cached on a random share of the GPU nodes; a replay reports the
// share of GPU pods placed on a node caching theirs, and the GPUs allocated, with gpudra's
// fragmentation score alone and with the DataLocality score added as gpudra-scheduler's
// default profile weighs them.

// DataSetup says how many datasets there are and where they are cached.
type DataSetup struct {
	// Datasets is how many datasets the GPU pods read (at least 1).
	Datasets int
	// CachedShare is the share of GPU nodes caching each dataset (0 to 1).
	CachedShare float64
	// FragWeight and DataWeight weigh the fragmentation and data scores (both 0 to 100), as
	// a KubeSchedulerConfiguration's plugin weights do; DataWeight 0 is the baseline.
	FragWeight, DataWeight int64
}

// DataResult is one replay's outcome.
type DataResult struct {
	// GPUPods is how many GPU pods were placed; Local how many of them on a node caching
	// their dataset.
	GPUPods, Local int
	// Allocated is the share of GPU capacity allocated at the end (0 to 1).
	Allocated float64
}

// LocalShare is Local over GPUPods.
func (r DataResult) LocalShare() float64 {
	if r.GPUPods == 0 {
		return 0
	}
	return float64(r.Local) / float64(r.GPUPods)
}

// dataCluster is where each dataset is cached: caches[node][dataset].
type dataCluster struct {
	caches   map[string][]bool
	datasets int
}

func newDataCluster(nodes []placement.NodeSpec, s DataSetup, seed int64) dataCluster {
	r := rand.New(rand.NewSource(seed))
	c := dataCluster{caches: map[string][]bool{}, datasets: s.Datasets}
	for _, n := range nodes {
		if n.GPUs == 0 {
			continue
		}
		c.caches[n.Name] = make([]bool, s.Datasets)
		for d := range s.Datasets {
			c.caches[n.Name][d] = r.Float64() < s.CachedShare
		}
	}
	return c
}

// datasetOf is the dataset a pod reads.
func (c dataCluster) datasetOf(p *placement.Pod) int {
	h := fnv.New32a()
	h.Write([]byte(p.Name))
	return int(h.Sum32() % uint32(c.datasets))
}

func (c dataCluster) cached(node string, p *placement.Pod) bool {
	return p.GPUs > 0 && c.caches[node] != nil && c.caches[node][c.datasetOf(p)]
}

// dataPolicy adds the data score to another policy's, clamped to 0..100 as the plugins'.
type dataPolicy struct {
	inner       placement.Policy
	data        dataCluster
	frag, local int64
}

func (d *dataPolicy) Name() string { return d.inner.Name() + "+data" }

// Behaviour: scores depend on the pod's dataset, not only its shape, so they are not cached.
func (d *dataPolicy) Behaviour() reproduction.Behaviour {
	return reproduction.Behaviour{Volatile: true}
}

func (d *dataPolicy) Score(n *placement.Node, p *placement.Pod) placement.Choice {
	c := d.inner.Score(n, p)
	c.Score = d.frag * min(max(c.Score, 0), 100)
	if d.data.cached(n.Name, p) {
		c.Score += d.local * 100
	}
	return c
}

// ReplayData replays pods on nodes with gpudra's fragmentation policy, the data score
// weighed in as s says, one seed's arrival order (no allocator: the policy's accounting).
func ReplayData(nodes []placement.NodeSpec, pods []placement.Pod, s DataSetup, seed int64) (DataResult, error) {
	if s.Datasets < 1 || s.CachedShare < 0 || s.CachedShare > 1 {
		return DataResult{}, fmt.Errorf("data setup %+v: want at least 1 dataset and a cached share of 0 to 1", s)
	}
	w, err := reproduction.NewWorkload(seed, pods, nodes)
	if err != nil {
		return DataResult{}, err
	}
	data := newDataCluster(nodes, s, seed)
	pol := &dataPolicy{inner: placement.NewGpudra(pods), data: data, frag: s.FragWeight, local: s.DataWeight}
	ns := make([]*placement.Node, len(nodes))
	var capacity, allocated int64
	for k, sp := range nodes {
		ns[k] = placement.NewNode(sp, w.Ranks[k])
		capacity += int64(sp.GPUs) * placement.MilliPerGPU
	}
	sched := reproduction.NewScheduler(ns, pol, w.Rand)
	var res DataResult
	for k := range w.Arrivals {
		p := &w.Arrivals[k]
		c, ok := sched.Best(p, nil)
		if !ok {
			continue
		}
		n := ns[c.Node]
		if err := n.Place(p, c.GPUs); err != nil {
			return res, fmt.Errorf("pod %s on node %s: %w", p.Name, n.Name, err)
		}
		allocated += p.Demand()
		if p.GPUs > 0 {
			res.GPUPods++
			if data.cached(n.Name, p) {
				res.Local++
			}
		}
	}
	res.Allocated = float64(allocated) / float64(capacity)
	return res, nil
}

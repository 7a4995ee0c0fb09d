package reproduction

import (
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gpudra/gpudra/topology/placement"
)

// Protocol constants of the FGD paper's evaluation.
const (
	// InflationPercent is the arrived demand to reach, in percent of GPU capacity.
	InflationPercent = 130
	// clientDraws are Float64 draws the reference's client machinery consumes
	// between tuning and the node permutation.
	clientDraws = 10
)

// MaxArrivals bounds a workload's pods, copies included (the paper's traces reach 130 %
// of their 6 212 GPUs with some 16 000).
const MaxArrivals = 2_000_000

// Seeds are the paper's seeds.
var Seeds = []int64{42, 43, 44, 45, 46, 47, 48, 49, 50, 51}

// Workload is one seed's experiment: the arrival order and the nodes' tie-break ranks.
type Workload struct {
	Seed     int64
	Arrivals []placement.Pod
	// Ranks[k] is the tie-break rank of the k-th node of the node list.
	Ranks []int
	// Rand is the seed's random stream after the protocol's draws; the Random policy
	// continues it.
	Rand *rand.Rand
}

// NewWorkload draws a seed's arrival order and ranks exactly as the paper's simulator
// does (math/rand v1): one Int; a shuffle of the pods sorted by name; inflation to
// 130 % of GPU capacity (copies drawn from the sorted list) or deflation (removals from
// the shuffled list); ten Float64; then Perm over the nodes. It fails when inflation is
// needed and no pod asks for GPUs, or when reaching 130 % takes more than MaxArrivals pods.
func NewWorkload(seed int64, pods []placement.Pod, nodes []placement.NodeSpec) (Workload, error) {
	r := rand.New(rand.NewSource(seed))
	r.Int()
	sorted := append([]placement.Pod(nil), pods...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	arrivals := append([]placement.Pod(nil), sorted...)
	r.Shuffle(len(arrivals), func(i, j int) { arrivals[i], arrivals[j] = arrivals[j], arrivals[i] })

	var capacity int64
	for _, n := range nodes {
		capacity += int64(n.GPUs) * placement.MilliPerGPU
	}
	s := demandOf(pods)
	target := capacity * InflationPercent / 100
	switch {
	case s < target:
		if !slices.ContainsFunc(pods, func(p placement.Pod) bool { return p.GPUMilli > 0 }) {
			return Workload{}, fmt.Errorf("pods: none of the %d pods asks for GPUs, so no copies of them reach %d %% of the nodes' %d GPUs",
				len(pods), InflationPercent, capacity/placement.MilliPerGPU)
		}
		for i := 0; ; i++ {
			if len(arrivals) >= MaxArrivals {
				return Workload{}, fmt.Errorf("pods: reaching %d %% of the nodes' %d GPUs with copies of %d pods asking for %d milli-GPU takes more than %d pods, the most a workload may have",
					InflationPercent, capacity/placement.MilliPerGPU, len(pods), demandOf(pods), MaxArrivals)
			}
			c := sorted[r.Intn(len(sorted))]
			if s+c.GPUMilli > target {
				break
			}
			s += c.Demand()
			c.Name = c.Name + "-tuned-" + strconv.Itoa(i)
			arrivals = append(arrivals, c)
		}
	case s > target:
		for s > target {
			k := r.Intn(len(arrivals))
			s -= arrivals[k].Demand()
			arrivals = append(arrivals[:k], arrivals[k+1:]...)
		}
	}
	for range clientDraws {
		r.Float64()
	}
	perm := r.Perm(len(nodes))
	ranks := make([]int, len(nodes))
	for k, n := range nodes {
		idx, err := nodeNumber(n.Name)
		if err != nil || idx >= len(perm) {
			idx = k
		}
		ranks[k] = perm[idx]
	}
	return Workload{Seed: seed, Arrivals: arrivals, Ranks: ranks, Rand: r}, nil
}

func demandOf(pods []placement.Pod) int64 {
	var s int64
	for k := range pods {
		s += pods[k].Demand()
	}
	return s
}

// nodeNumber is XXXX in openb-node-XXXX.
func nodeNumber(name string) (int, error) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return 0, fmt.Errorf("node %q has no number", name)
	}
	return strconv.Atoi(name[i+1:])
}

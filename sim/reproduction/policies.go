package reproduction

import (
	"math/rand"

	"github.com/gpudra/gpudra/topology/placement"
)

// Normalizers of the paper's formulas: a node's CPU and GPU capacity at most.
const (
	cpuScale = 128000.0
	gpuScale = 8000.0
	maxScore = 100
)

// Random places a pod on a uniformly random feasible node and, for a fraction, on a
// uniformly random fitting GPU.
type Random struct{ Rand *rand.Rand }

func (*Random) Name() string         { return RandomName }
func (*Random) Behaviour() Behaviour { return Behaviour{Volatile: true} }
func (r *Random) Score(n *placement.Node, p *placement.Pod) placement.Choice {
	c := placement.Choice{Score: r.Rand.Int63()}
	if p.Fractional() {
		var fit []int
		for i, g := range n.GPUFree {
			if g >= p.GPUMilli {
				fit = append(fit, i)
			}
		}
		c.GPUs = []int{fit[r.Rand.Intn(len(fit))]}
		return c
	}
	c.GPUs = placement.DefaultGPUs(n, p)
	return c
}

// DotProd prefers the node whose free (CPU, GPU) vector is least aligned with the pod's
// demand: score = ⌊100·(1 − a·b/2)⌋, a = (C/128000, L/8000), b = (c/128000, k·m/8000).
type DotProd struct{}

func (DotProd) Name() string { return DotProdName }
func (DotProd) Score(n *placement.Node, p *placement.Pod) placement.Choice {
	a0, a1 := float64(n.CPUFree)/cpuScale, float64(n.GPULeft())/gpuScale
	b0, b1 := float64(p.CPU)/cpuScale, float64(p.Demand())/gpuScale
	return placement.Choice{Score: int64(maxScore * (1 - (a0*b0+a1*b1)/2)), GPUs: placement.DefaultGPUs(n, p)}
}

// GpuClustering keeps pods of one kind (share-gpu, 1-gpu, 2-gpu, …) together:
// ⌊25·(8000 − L)/8000⌋ plus 75 when the node runs only the pod's kind, 50 when it runs
// it among others, 25 when it runs no GPU pod, 0 otherwise. CPU pods score 0.
type GpuClustering struct{}

func (GpuClustering) Name() string { return GpuClusteringName }
func (GpuClustering) Score(n *placement.Node, p *placement.Pod) placement.Choice {
	tag := p.Tag()
	if tag < 0 {
		return placement.Choice{}
	}
	base := int64(maxScore/4) * (gpuScale - n.GPULeft()) / gpuScale
	kinds := 0
	for _, c := range n.Tags {
		if c > 0 {
			kinds++
		}
	}
	var bonus int64
	switch {
	case n.Tags[tag] > 0 && kinds == 1:
		bonus = maxScore * 3 / 4
	case n.Tags[tag] > 0:
		bonus = maxScore * 2 / 4
	case kinds == 0:
		bonus = maxScore / 4
	}
	return placement.Choice{Score: base + bonus, GPUs: placement.DefaultGPUs(n, p)}
}

// GpuPacking prefers, in this order, GPUs already in use (the fuller the better), free
// GPUs on a node in use (the fewer the better), and idle nodes (the smaller the better).
// CPU pods score 0.
type GpuPacking struct{}

func (GpuPacking) Name() string { return GpuPackingName }
func (GpuPacking) Score(n *placement.Node, p *placement.Pod) placement.Choice {
	gpus := placement.DefaultGPUs(n, p)
	if p.GPUs == 0 {
		return placement.Choice{}
	}
	free := n.FreeGPUs()
	if free == len(n.GPUFree) {
		return placement.Choice{Score: max(maxScore/3-int64(free), int64(free)), GPUs: gpus}
	}
	// The k fitting GPUs with the least left (index order on ties).
	use := tightest(n.GPUFree, p.GPUMilli, p.GPUs)
	u := 0
	var ratio int64
	for _, i := range use {
		if n.GPUFree[i] == placement.MilliPerGPU {
			u++
		}
		ratio += n.GPUFree[i] * 100 / placement.MilliPerGPU
	}
	if u > 0 {
		return placement.Choice{Score: max(maxScore/2-int64(u), maxScore/3), GPUs: gpus}
	}
	return placement.Choice{Score: max(maxScore-ratio/10, maxScore/2), GPUs: gpus}
}

// tightest returns the k GPUs with at least m left and the least left, index order on ties.
func tightest(free []int64, m int64, k int) []int {
	out := make([]int, 0, k)
	used := make([]bool, len(free))
	for len(out) < k {
		best := -1
		for i, g := range free {
			if !used[i] && g >= m && (best < 0 || g < free[best]) {
				best = i
			}
		}
		if best < 0 {
			return out
		}
		used[best] = true
		out = append(out, best)
	}
	return out
}

// BestFit prefers the node with the least CPU and GPU left after placement:
// ⌊100·(1 − v)⌋, v = ((C − c)/128000 + (L − k·m)/8000)/2. The paper min–max rescales
// it over feasible nodes, which keeps the order and therefore the winner.
type BestFit struct{}

func (BestFit) Name() string { return BestFitName }
func (BestFit) Score(n *placement.Node, p *placement.Pod) placement.Choice {
	v := (float64(n.CPUFree-p.CPU)/cpuScale)*0.5 + (float64(n.GPULeft()-p.Demand())/gpuScale)*0.5
	return placement.Choice{Score: int64(maxScore * (1 - v)), GPUs: placement.DefaultGPUs(n, p)}
}

// LeastAllocated is what kube-scheduler does today for pods whose GPUs come from DRA:
// NodeResourcesFit's LeastAllocated on CPU and memory (equal weights), with the
// allocator's first fit inside the node and kube-scheduler's node sampling and
// random tie-break.
type LeastAllocated struct{}

func (LeastAllocated) Name() string         { return KubeName }
func (LeastAllocated) Behaviour() Behaviour { return Behaviour{Kube: true} }
func (LeastAllocated) Score(n *placement.Node, p *placement.Pod) placement.Choice {
	least := func(capacity, free, req int64) int64 {
		if capacity == 0 || free < req {
			return 0
		}
		return (free - req) * maxScore / capacity
	}
	s := (least(n.CPU, n.CPUFree, p.CPU) + least(n.Memory, n.MemoryFree, p.Memory)) / 2
	return placement.Choice{Score: s, GPUs: placement.FirstFitGPUs(n, p)}
}

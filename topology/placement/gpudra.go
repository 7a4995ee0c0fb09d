package placement

import "slices"

// Gpudra is gpudra's own policy for DRA clusters: fragmentation gradient descent on
// what the allocator will really do, with GPUs that the node's CPU or memory strands
// counted as fragmented.
//
// Two differences from FGD:
//
//  1. The GPUs scored are the allocator's. In a DRA cluster the structured allocator,
//     not the scheduler, picks the GPU inside a node: first fit in slice order
//     (gpu-0-share, gpu-1-share, …; whole GPUs lowest index first). FGD scores a node
//     by the GPU it would choose itself, which the allocator then ignores; gpudra
//     scores it by the allocator's first-fit GPUs (FirstFitGPUs).
//  2. The measure is StrandedFragmentation: FGD's expected unusable GPU milli, except
//     that a typical pod only "can use" a node whose memory also fits it, and a
//     GPU-sharing typical pod only as many of its fitting GPUs as the node's CPU and
//     memory can give a copy of it. FGD asks whether the node has CPU for one more
//     typical pod; a node with six half-used GPUs and CPU left for two more shares
//     strands four of them, which FGD does not see. At 130 % demand most of the GPU
//     capacity left unallocated sits on such nodes.
//
// The score is FGD's, ⌊100σ((F_before − F_after)/1000)⌋, ties to the smallest rank.
//
// Measured in DRA mode (first fit) at 130 %, mean of seeds 42–51, against FGD's
// published figure on every trace: this policy is above it on all eleven, by 0.09
// (multigpu30) to 0.90 (gpuspec20); docs/placement.md has the table. Variants measured
// and rejected (default / cpu100 / cpu200 / gpushare40 / gpuspec10 / multigpu30, "–"
// not run; FGD published 95.39 / 95.35 / 95.05 / 94.15 / 94.95 / 96.46):
//
//   - FGD's measure on first fit (this policy until now): 95.41 / 95.34 / 95.03 /
//     94.09 / 94.85 / 96.46 — below FGD on four traces.
//   - memory in FGD's feasibility only (no copy cap): 95.41 / 95.36 / 95.12 / 94.20 /
//     95.05 / 96.58 — above everywhere (multigpu20 95.93, gpushare60 91.42,
//     gpushare80 89.32), but by only 0.01–0.02 on cpu100, gpushare60 and gpushare80.
//   - the cap in milli (usable ≤ copies × GPUs × per-GPU milli) for every typical
//     pod (cpu100 / cpu200 / gpushare40 / gpuspec10 only): CPU 95.46 / 95.43 / 93.99 /
//     95.53; memory 95.34 / 95.45 / 93.97 / 95.56; both 95.45 / 95.44 / 93.89 / 95.52
//     — loses gpushare40.
//   - typical memory as the median instead of the mean (memory feasibility only):
//     95.33 on cpu100 (vs 95.36), 95.01 on gpuspec10.
//   - the cap in GPUs for every typical pod, whole-GPU ones too: CPU only 95.64 /
//     95.59 / 95.66 / 94.37 / 95.64 / 96.20; CPU and memory 95.67 / 95.66 / 95.67 /
//     94.28 / 95.81 / 96.32 — below FGD on multigpu30. Capping only whole-GPU typical
//     pods: 96.31 (CPU) / 96.43 (CPU and memory) on multigpu30. Presumably because a
//     whole-GPU pod's CPU is already FGD's feasibility check, and capping it as well
//     over-counts the nodes that multi-GPU pods need empty.
//   - the cap for shares on CPU only (no memory): 95.80 / 95.79 / 95.85 / 94.46 /
//     95.60 / 96.53 — above everywhere but below this policy on 10 of 12 traces.
//
// Earlier variants (FGD's measure, default trace, seeds 42–45): a finer score than
// ⌊100σ(Δ/1000)⌋ (94.5), a packing tie-break (95.3), a CPU spreading tie-break (93.4),
// LeastAllocated as tie-break (94.5), typical pods weighted by GPU demand (95.1), σ
// scale 500/2000/4000 (95.2/95.4/95.3). FGD's coarse score leaves many ties that the
// random rank spreads, which matters.
type Gpudra struct {
	typical []TypicalPod
	scratch []int64
}

// NewGpudra builds gpudra's policy over the trace's pods (before tuning). Pods without
// memory (0) leave memory out of the measure.
func NewGpudra(pods []Pod) *Gpudra { return &Gpudra{typical: TypicalPods(pods)} }

func (*Gpudra) Name() string { return GpudraName }

func (g *Gpudra) Score(n *Node, p *Pod) Choice {
	gpus := FirstFitGPUs(n, p)
	before := StrandedFragmentation(g.typical, n.Model, n.CPUFree, n.MemoryFree, n.GPUFree)
	g.scratch = append(g.scratch[:0], n.GPUFree...)
	for _, i := range gpus {
		g.scratch[i] -= p.GPUMilli
	}
	after := StrandedFragmentation(g.typical, n.Model, n.CPUFree-p.CPU, n.MemoryFree-p.Memory, g.scratch)
	return Choice{Score: fgdScore(before, after), GPUs: gpus}
}

// StrandedFragmentation is gpudra's measure of a node: Σ_t p_t · S_t, the expected
// milli-GPU that the next typical pod t could not use. S_t is all free GPU milli when t
// is CPU-only, may not use the model, does not fit for GPUs, or the node has less CPU
// or memory left than t asks (t.Memory; 0 = not checked). Otherwise t can use the GPUs
// with at least its per-GPU share left; if t is a share, only as many of them as the
// node has CPU and memory for copies of t (the fullest left out), and S_t is the rest.
func StrandedFragmentation(typical []TypicalPod, model string, cpuFree, memoryFree int64, gpuFree []int64) float64 {
	var l int64
	for _, g := range gpuFree {
		l += g
	}
	var f float64
	for k := range typical {
		f += typical[k].Weight * float64(strandedFor(&typical[k], model, cpuFree, memoryFree, gpuFree, l))
	}
	return f
}

func strandedFor(t *TypicalPod, model string, cpuFree, memoryFree int64, gpuFree []int64, l int64) int64 {
	if t.GPUMilli == 0 || cpuFree < t.CPU || memoryFree < t.Memory {
		return l
	}
	if len(t.ModelList) > 0 && !containsString(t.ModelList, model) {
		return l
	}
	fit := 0
	var usable int64
	for _, g := range gpuFree {
		if g >= t.GPUMilli {
			fit++
			usable += g
		}
	}
	if fit < t.GPUs {
		return l
	}
	if t.GPUMilli < MilliPerGPU {
		if copies := copiesFitting(t, cpuFree, memoryFree); copies < int64(fit) {
			usable = largestFitting(gpuFree, t.GPUMilli, int(copies))
		}
	}
	return l - usable
}

// copiesFitting is how many copies of t the node's CPU and memory can hold (a large
// number when t asks for neither).
func copiesFitting(t *TypicalPod, cpuFree, memoryFree int64) int64 {
	copies := int64(1) << 62
	if t.CPU > 0 {
		copies = cpuFree / t.CPU
	}
	if t.Memory > 0 {
		copies = min(copies, memoryFree/t.Memory)
	}
	return copies
}

// largestFitting sums the k largest free amounts among GPUs with at least m left.
func largestFitting(gpuFree []int64, m int64, k int) int64 {
	var buf [16]int64
	fitting := buf[:0]
	for _, g := range gpuFree {
		if g >= m {
			fitting = append(fitting, g)
		}
	}
	slices.Sort(fitting)
	var sum int64
	for _, g := range fitting[len(fitting)-k:] {
		sum += g
	}
	return sum
}

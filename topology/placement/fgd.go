package placement

import (
	"math"
	"sort"
	"strings"
)

// TypicalCoverage is the share of pods the typical pod shapes must cover.
const TypicalCoverage = 0.95

// TypicalPod is one pod shape FGD expects, with its weight.
type TypicalPod struct {
	Shape
	// Models is Shape.Models split; empty means any.
	ModelList []string
	Weight    float64
	// Memory is the mean memory (MiB) of the pods of this shape. FGD does not use it;
	// gpudra's policy does. 0 when unknown.
	Memory int64
}

// TypicalPods are the paper's typical pods: shapes (cpu, per-GPU milli, GPUs, gpu_spec)
// of the trace before tuning, CPU pods included, by count (ties by shape, descending),
// the shortest prefix covering 95 % of pods, weights renormalised over that prefix.
//
// A weight is computed as the reference simulator does, (count/total)/(covered/total)
// rather than count/covered: the two differ in the last bit, and FGD's truncated score
// turns such differences into different decisions (see Fragmentation).
func TypicalPods(pods []Pod) []TypicalPod {
	counts := map[Shape]int{}
	memory := map[Shape]int64{}
	for k := range pods {
		s := ShapeOf(&pods[k])
		counts[s]++
		memory[s] += pods[k].Memory
	}
	all := make([]TypicalPod, 0, len(counts))
	for s, c := range counts {
		all = append(all, TypicalPod{Shape: s, Weight: float64(c), Memory: memory[s] / int64(c)})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Weight != all[j].Weight {
			return all[i].Weight > all[j].Weight
		}
		return shapeLess(all[j].Shape, all[i].Shape)
	})
	total := float64(len(pods))
	var cum float64
	n := 0
	for n < len(all) && cum < TypicalCoverage*total {
		cum += all[n].Weight
		n++
	}
	out := all[:n]
	for k := range out {
		out[k].Weight = (out[k].Weight / total) / (cum / total)
		if out[k].Models != "" {
			out[k].ModelList = strings.Split(out[k].Models, "|")
		}
	}
	return out
}

// ShapeOf is a pod's shape.
func ShapeOf(p *Pod) Shape {
	return Shape{CPU: p.CPU, GPUMilli: p.GPUMilli, GPUs: p.GPUs, Models: strings.Join(p.Models, "|")}
}

func shapeLess(a, b Shape) bool {
	switch {
	case a.CPU != b.CPU:
		return a.CPU < b.CPU
	case a.GPUMilli != b.GPUMilli:
		return a.GPUMilli < b.GPUMilli
	case a.GPUs != b.GPUs:
		return a.GPUs < b.GPUs
	default:
		return a.Models < b.Models
	}
}

// Fragmentation is FGD's measure of a node: the expected milli-GPU that the next
// typical pod could not use, Σ_t p_t · F_t, where F_t is all free GPU milli when t is
// CPU-only, may not use the model, or does not fit, and otherwise the milli on GPUs
// with less than t's per-GPU share left.
//
// The sum is formed the way the reference simulator forms it: each term is added to
// the bucket of its case (lack both, lack GPU, lack CPU, CPU pod, CPU pod lacking CPU,
// no access) and the buckets are then added in that order. Mathematically this is the
// same sum; in floating point it is not, and because FGD's score is truncated
// (⌊100σ(Δ/1000)⌋), a Δ that should be exactly 0 but comes out as −1e−13 scores 49
// instead of 50, and the replay diverges from there. Summed term by term, 7 of
// gpuspec10's 10 seeds differed from the reference's runs (mean 94.89 against the
// paper's 94.95), and one seed each of cpu200 and gpushare80; with the buckets but
// count/covered weights (see TypicalPods), 2 seeds of gpuspec10 still did. With both
// as the reference does, FGD and BestFit match the reference's published runs
// (kubernetes-scheduler-simulator, experiments/analysis/expected_results) on every
// seed of every trace.
func Fragmentation(typical []TypicalPod, model string, cpuFree int64, gpuFree []int64) float64 {
	var l int64
	for _, g := range gpuFree {
		l += g
	}
	var buckets [fragBuckets]float64
	for k := range typical {
		t := &typical[k]
		b, amount := typeFragmentation(t, model, cpuFree, gpuFree, l)
		buckets[b] += t.Weight * float64(amount)
	}
	var f float64
	for _, v := range buckets {
		f += v
	}
	return f
}

// The reference simulator's fragmentation cases, in the order its buckets are summed.
const (
	lackBoth = iota
	lackGPU  // also holds the unusable part of the GPUs when t fits
	lackCPU
	cpuPod
	cpuPodLackCPU
	noAccess
	fragBuckets
)

// typeFragmentation is F_t and the bucket it is counted in.
func typeFragmentation(t *TypicalPod, model string, cpuFree int64, gpuFree []int64, l int64) (int, int64) {
	cpuOK := cpuFree >= t.CPU
	switch {
	case t.GPUMilli == 0 && cpuOK:
		return cpuPod, l
	case t.GPUMilli == 0:
		return cpuPodLackCPU, l
	case len(t.ModelList) > 0 && !containsString(t.ModelList, model):
		return noAccess, l
	}
	fit := 0
	var small int64
	for _, g := range gpuFree {
		if g >= t.GPUMilli {
			fit++
		} else {
			small += g
		}
	}
	switch {
	case fit >= t.GPUs && cpuOK:
		return lackGPU, small
	case fit >= t.GPUs:
		return lackCPU, l
	case cpuOK:
		return lackGPU, l
	default:
		return lackBoth, l
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// FGD is Fragmentation Gradient Descent: place the pod where it increases the node's
// fragmentation least, score = ⌊100·σ((F_before − F_after)/1000)⌋; a fraction goes to
// the GPU with the best score (lowest index on ties), whole GPUs to the lowest-index
// free ones.
type FGD struct {
	typical []TypicalPod
	scratch []int64
}

// NewFGD builds FGD over the trace's pods (before tuning).
func NewFGD(pods []Pod) *FGD { return &FGD{typical: TypicalPods(pods)} }

func (*FGD) Name() string { return FGDName }

func (f *FGD) Score(n *Node, p *Pod) Choice {
	before := Fragmentation(f.typical, n.Model, n.CPUFree, n.GPUFree)
	if p.Fractional() {
		best := Choice{}
		for i, g := range n.GPUFree {
			if g < p.GPUMilli {
				continue
			}
			after := f.after(n, p, []int{i})
			s := fgdScore(before, after)
			if best.GPUs == nil || s > best.Score {
				best = Choice{Score: s, GPUs: []int{i}}
			}
		}
		return best
	}
	gpus := LowestFree(n.GPUFree, p.GPUs)
	return Choice{Score: fgdScore(before, f.after(n, p, gpus)), GPUs: gpus}
}

// after is the node's fragmentation once p takes the given GPUs.
func (f *FGD) after(n *Node, p *Pod, gpus []int) float64 {
	f.scratch = append(f.scratch[:0], n.GPUFree...)
	for _, i := range gpus {
		f.scratch[i] -= p.GPUMilli
	}
	return Fragmentation(f.typical, n.Model, n.CPUFree-p.CPU, f.scratch)
}

// maxScore is kube-scheduler's highest node score (framework.MaxNodeScore).
const maxScore = 100

func fgdScore(before, after float64) int64 {
	return int64(sigmoid((before-after)/1000) * maxScore)
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

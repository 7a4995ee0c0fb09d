package placement

import (
	"fmt"
	"slices"
)

// MilliPerGPU is one whole GPU in milli-GPU.
const MilliPerGPU = 1000

// Pod is one task of a trace: what it asks for, as the paper's simulator reads it.
type Pod struct {
	Name string
	// CPU is in milli-CPU, Memory in MiB.
	CPU, Memory int64
	// GPUs is the number of GPUs; GPUMilli the share of each (1000 = whole GPUs).
	GPUs     int
	GPUMilli int64
	// Models are the acceptable GPU models (gpu_spec); empty means any.
	Models []string
}

// Demand is the pod's GPU demand in milli-GPU.
func (p *Pod) Demand() int64 { return int64(p.GPUs) * p.GPUMilli }

// Fractional reports whether the pod asks for part of one GPU.
func (p *Pod) Fractional() bool { return p.GPUs == 1 && p.GPUMilli < MilliPerGPU }

// Shape is what placement decisions depend on: everything but the name and memory.
type Shape struct {
	CPU      int64
	GPUMilli int64
	GPUs     int
	Models   string // gpu_spec as written, "" for any
}

// NodeSpec is one node of a trace.
type NodeSpec struct {
	Name string
	// CPU is in milli-CPU, Memory in MiB.
	CPU, Memory int64
	GPUs        int
	// Model is the GPU model code ("" for a CPU-only node).
	Model string
}

// MaxPodsPerNode is the paper's pod limit per node.
const MaxPodsPerNode = 1001

// Node is a node's state as policies see it: what is left, and what runs there.
type Node struct {
	NodeSpec
	// Rank breaks score ties: the smaller rank wins.
	Rank                int
	CPUFree, MemoryFree int64
	Pods                int
	// GPUFree is the milli-GPU left on each GPU, by GPU index.
	GPUFree []int64
	// Tags counts the GPU pods on the node by GpuClustering tag (0 = share-gpu, k = k-gpu).
	Tags map[int]int
	// Version changes whenever the node's state does (score caches key on it).
	Version uint64
}

// NewNode returns an empty node.
func NewNode(spec NodeSpec, rank int) *Node {
	n := &Node{NodeSpec: spec, Rank: rank, CPUFree: spec.CPU, MemoryFree: spec.Memory, GPUFree: make([]int64, spec.GPUs), Tags: map[int]int{}}
	for i := range n.GPUFree {
		n.GPUFree[i] = MilliPerGPU
	}
	return n
}

// GPULeft is L, the milli-GPU left on the node.
func (n *Node) GPULeft() int64 {
	var l int64
	for _, g := range n.GPUFree {
		l += g
	}
	return l
}

// FreeGPUs is how many GPUs are fully free.
func (n *Node) FreeGPUs() int {
	k := 0
	for _, g := range n.GPUFree {
		if g == MilliPerGPU {
			k++
		}
	}
	return k
}

// Accepts reports whether the node's GPU model is one the pod accepts.
func (n *Node) Accepts(p *Pod) bool {
	return len(p.Models) == 0 || slices.Contains(p.Models, n.Model)
}

// Fits is the paper's feasibility: CPU, memory and pod count fit; for a GPU pod the
// model matches and enough GPUs have g ≥ the per-GPU milli.
func (n *Node) Fits(p *Pod) bool {
	if n.CPUFree < p.CPU || n.MemoryFree < p.Memory || n.Pods >= MaxPodsPerNode {
		return false
	}
	if p.GPUs == 0 {
		return true
	}
	if !n.Accepts(p) {
		return false
	}
	return fitting(n.GPUFree, p.GPUMilli) >= p.GPUs
}

// fitting counts the GPUs with at least m milli left.
func fitting(free []int64, m int64) int {
	k := 0
	for _, g := range free {
		if g >= m {
			k++
		}
	}
	return k
}

// Tag is the pod's GpuClustering tag: 0 for share-gpu, k for k-gpu, -1 for CPU pods.
func (p *Pod) Tag() int {
	switch {
	case p.GPUs == 0:
		return -1
	case p.Fractional():
		return 0
	default:
		return p.GPUs
	}
}

// Place records the pod on the node on the given GPUs.
func (n *Node) Place(p *Pod, gpus []int) error {
	if len(gpus) != p.GPUs {
		return fmt.Errorf("pod %s asks for %d GPUs, placed on %v", p.Name, p.GPUs, gpus)
	}
	for _, i := range gpus {
		if i < 0 || i >= len(n.GPUFree) || n.GPUFree[i] < p.GPUMilli {
			return fmt.Errorf("pod %s: GPU %d of node %s has not %d milli left", p.Name, i, n.Name, p.GPUMilli)
		}
	}
	for _, i := range gpus {
		n.GPUFree[i] -= p.GPUMilli
	}
	n.CPUFree -= p.CPU
	n.MemoryFree -= p.Memory
	n.Pods++
	if t := p.Tag(); t >= 0 {
		n.Tags[t]++
	}
	n.Version++
	return nil
}

// LowestFree returns the k lowest-index fully free GPUs (nil when there are fewer):
// the paper's choice for whole-GPU pods, and the allocator's first fit.
func LowestFree(free []int64, k int) []int {
	out := make([]int, 0, k)
	for i, g := range free {
		if len(out) == k {
			break
		}
		if g == MilliPerGPU {
			out = append(out, i)
		}
	}
	if len(out) < k {
		return nil
	}
	return out
}

// FirstFit is the lowest-index GPU with at least m milli left, or -1: what the DRA
// allocator picks for a share (it walks gpu-0-share, gpu-1-share, … in order).
func FirstFit(free []int64, m int64) int {
	for i, g := range free {
		if g >= m {
			return i
		}
	}
	return -1
}

// TightestFit is the GPU with the least milli left among those with at least m
// (lowest index on ties), or -1: the paper's choice for fractional pods.
func TightestFit(free []int64, m int64) int {
	best := -1
	for i, g := range free {
		if g >= m && (best < 0 || g < free[best]) {
			best = i
		}
	}
	return best
}

// DefaultGPUs is the paper's GPU choice for policies that do not choose themselves:
// the tightest fit for a fraction, the lowest-index free GPUs for whole GPUs.
func DefaultGPUs(n *Node, p *Pod) []int {
	switch {
	case p.GPUs == 0:
		return nil
	case p.Fractional():
		if i := TightestFit(n.GPUFree, p.GPUMilli); i >= 0 {
			return []int{i}
		}
		return nil
	default:
		return LowestFree(n.GPUFree, p.GPUs)
	}
}

// FirstFitGPUs is what the DRA allocator picks inside a node: the first share that
// fits, or the lowest-index free GPUs.
func FirstFitGPUs(n *Node, p *Pod) []int {
	switch {
	case p.GPUs == 0:
		return nil
	case p.Fractional():
		if i := FirstFit(n.GPUFree, p.GPUMilli); i >= 0 {
			return []int{i}
		}
		return nil
	default:
		return LowestFree(n.GPUFree, p.GPUs)
	}
}

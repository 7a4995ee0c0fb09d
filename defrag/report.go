package defrag

import (
	"math"

	"github.com/gpudra/gpudra/topology/placement"
)

// Report says how fragmented the cluster's GPUs are.
type Report struct {
	Nodes int `json:"nodes"`
	GPUs  int `json:"gpus"`
	// AllocatedGPUs is the GPU capacity allocated, in GPUs (shares count their compute).
	AllocatedGPUs float64 `json:"allocatedGPUs"`
	// FreeGPUs counts the GPUs with nothing allocated; LargestFree is the most of them on
	// one node: the largest whole-GPU pod that fits now.
	FreeGPUs    int `json:"freeGPUs"`
	LargestFree int `json:"largestFree"`
	// Fragmentation is the measure gpudra-scheduler scores with (StrandedFragmentation
	// summed over the nodes, in GPUs): the expected free GPU capacity the typical pods
	// could not use.
	Fragmentation float64 `json:"fragmentation"`
	// Stranded is the free capacity that large pods cannot use, by cause.
	Stranded Stranded `json:"stranded"`
}

// Stranded is free GPU capacity by the reason a whole-GPU pod cannot use it.
type Stranded struct {
	// SharedGPUs are GPUs that shares hold part of; SharedFree is the capacity left on
	// them (in GPUs): only shares can use it.
	SharedGPUs int     `json:"sharedGPUs"`
	SharedFree float64 `json:"sharedFree"`
	// ScatteredGPUs are free GPUs on nodes where other GPUs are in use (ScatteredNodes):
	// a pod that needs the whole node cannot use them.
	ScatteredGPUs  int `json:"scatteredGPUs"`
	ScatteredNodes int `json:"scatteredNodes"`
	// MIGPartialGPUs are GPUs with some MIG devices allocated and some free.
	MIGPartialGPUs int `json:"migPartialGPUs"`
}

// DefaultTypicalPods are the pod shapes the measure uses when none are given: whole-GPU
// pods of 1, 2, 4 and 8 GPUs and half-GPU shares, equally often.
func DefaultTypicalPods() []placement.TypicalPod {
	var pods []placement.Pod
	for _, g := range []int{1, 2, 4, 8} {
		pods = append(pods, placement.Pod{GPUs: g, GPUMilli: placement.MilliPerGPU})
	}
	pods = append(pods, placement.Pod{GPUs: 1, GPUMilli: placement.MilliPerGPU / 2})
	return placement.TypicalPods(pods)
}

// report measures the view. CPU and memory are not counted: the measure sees GPUs only.
func (v *view) report(typical []placement.TypicalPod) Report {
	var r Report
	const unbounded = math.MaxInt64 / 4
	var allocated int64
	for _, node := range v.nodeNames() {
		gs := v.nodes[node]
		r.Nodes++
		r.GPUs += len(gs)
		free := v.wholeFree(node)
		r.FreeGPUs += free
		r.LargestFree = max(r.LargestFree, free)
		if free > 0 && free < len(gs) {
			r.Stranded.ScatteredGPUs += free
			r.Stranded.ScatteredNodes++
		}
		model := ""
		for i := range gs {
			g := &gs[i]
			if model == "" {
				model = g.model
			}
			switch {
			case g.held > 0:
				allocated += placement.MilliPerGPU
			default:
				allocated += min(g.shareMilli, placement.MilliPerGPU)
			}
			if g.held == 0 && g.shareMilli > 0 && g.shareMilli < placement.MilliPerGPU {
				r.Stranded.SharedGPUs++
				r.Stranded.SharedFree += float64(placement.MilliPerGPU-g.shareMilli) / placement.MilliPerGPU
			}
			if g.migAssigned > 0 && g.migAssigned < g.migDevices {
				r.Stranded.MIGPartialGPUs++
			}
		}
		r.Fragmentation += placement.StrandedFragmentation(typical, model, unbounded, unbounded, v.freeMilli(node)) / placement.MilliPerGPU
	}
	r.AllocatedGPUs = round2(float64(allocated) / placement.MilliPerGPU)
	r.Fragmentation = round2(r.Fragmentation)
	r.Stranded.SharedFree = round2(r.Stranded.SharedFree)
	return r
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }

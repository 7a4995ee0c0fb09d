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
	// FreeNodes counts the nodes with every GPU free: room for a job that needs a whole node.
	FreeNodes int `json:"freeNodes"`
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

// NodeReport is one node's part of the Report.
type NodeReport struct {
	Node     string `json:"node"`
	GPUs     int    `json:"gpus"`
	FreeGPUs int    `json:"freeGPUs"`
	// SharedGPUs and SharedFree are the node's GPUs that shares hold part of, and the
	// capacity left on them (in GPUs).
	SharedGPUs int     `json:"sharedGPUs"`
	SharedFree float64 `json:"sharedFree"`
	// ScatteredGPUs are its free GPUs when others are in use (0 on a wholly free node).
	ScatteredGPUs  int `json:"scatteredGPUs"`
	MIGPartialGPUs int `json:"migPartialGPUs"`
}

// Measure reports how fragmented the cluster's GPUs are, and each node's part, without
// planning anything (Plan's Result.Before is the same Report).
func Measure(c *Cluster, opts Options) (Report, []NodeReport) {
	v := newView(c.Slices)
	for k := range c.Claims {
		if a := c.Claims[k].Status.Allocation; a != nil {
			v.apply(a, 1)
		}
	}
	typical := opts.TypicalPods
	if len(typical) == 0 {
		typical = DefaultTypicalPods()
	}
	return v.report(typical), v.nodeReports()
}

// nodeReports is each node's free and stranded GPUs, by node name.
func (v *view) nodeReports() []NodeReport {
	var out []NodeReport
	for _, node := range v.nodeNames() {
		gs := v.nodes[node]
		r := NodeReport{Node: node, GPUs: len(gs), FreeGPUs: v.wholeFree(node)}
		if r.FreeGPUs > 0 && r.FreeGPUs < len(gs) {
			r.ScatteredGPUs = r.FreeGPUs
		}
		for i := range gs {
			g := &gs[i]
			if g.held == 0 && g.shareMilli > 0 && g.shareMilli < placement.MilliPerGPU {
				r.SharedGPUs++
				r.SharedFree += float64(placement.MilliPerGPU-g.shareMilli) / placement.MilliPerGPU
			}
			if g.migAssigned > 0 && g.migAssigned < g.migDevices {
				r.MIGPartialGPUs++
			}
		}
		r.SharedFree = round2(r.SharedFree)
		out = append(out, r)
	}
	return out
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
		if free == len(gs) {
			r.FreeNodes++
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

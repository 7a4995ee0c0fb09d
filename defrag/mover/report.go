package mover

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpudra/gpudra/defrag"
)

// Causes of stranded GPU capacity, as the label cause of gpudra_defrag_stranded_gpus.
const (
	// CauseShares is the capacity left on GPUs that shares hold part of.
	CauseShares = "shares"
	// CauseScattered is free GPUs on nodes where other GPUs are in use.
	CauseScattered = "scattered"
	// CauseMIG is GPUs with some MIG devices allocated and some free.
	CauseMIG = "mig"
)

// The planner's report of the cluster, measured every Interval.
var (
	fragmentation = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "gpudra_defrag_fragmentation_gpus",
		Help: "Fragmentation of the cluster's GPUs (gpudra-scheduler's measure summed over nodes): the expected free GPU capacity the typical pods could not use, in GPUs.",
	})
	stranded = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gpudra_defrag_stranded_gpus",
		Help: "Free GPU capacity a whole-GPU pod cannot use, in GPUs, by cause (shares: left on GPUs that shares hold part of; scattered: free GPUs on partly used nodes; mig: GPUs with some MIG devices allocated and some free).",
	}, []string{"cause"})
	freeGPUs = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "gpudra_defrag_free_gpus",
		Help: "GPUs with nothing allocated on them.",
	})
	freeNodes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "gpudra_defrag_free_nodes",
		Help: "Nodes with every GPU free.",
	})
	// Vectors without labels, so that they can be absent when no plan frees a node.
	freeNodeMoves = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gpudra_defrag_free_node_moves",
		Help: "Moves (pods, or Kueue gangs moved whole) the plan to free one whole node needs: 0 when a node is free already; absent when no plan within the eviction bound frees one.",
	}, nil)
	freeNodeEvictions = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gpudra_defrag_free_node_evictions",
		Help: "Pods the plan to free one whole node evicts; absent when no plan within the eviction bound frees one.",
	}, nil)
)

var reportMetrics = []prometheus.Collector{fragmentation, stranded, freeGPUs, freeNodes, freeNodeMoves, freeNodeEvictions}

// Measure plans to free one whole node (it moves nothing) and sets the report gauges to its
// report of the cluster and the moves it needs.
func (m *Mover) Measure(ctx context.Context) error {
	cluster, err := m.cluster(ctx)
	if err != nil {
		return err
	}
	res, err := defrag.Plan(ctx, cluster, defrag.Goal{FreeNode: true, MaxEvictions: m.MaxEvictions}, defrag.Options{Labels: m.Labels})
	if err != nil {
		return err
	}
	setReport(res)
	return nil
}

// setReport sets the gauges to a plan's report and moves.
func setReport(res *defrag.Result) {
	r := res.Before
	fragmentation.Set(r.Fragmentation)
	stranded.WithLabelValues(CauseShares).Set(r.Stranded.SharedFree)
	stranded.WithLabelValues(CauseScattered).Set(float64(r.Stranded.ScatteredGPUs))
	stranded.WithLabelValues(CauseMIG).Set(float64(r.Stranded.MIGPartialGPUs))
	freeGPUs.Set(float64(r.FreeGPUs))
	freeNodes.Set(float64(r.FreeNodes))
	freeNodeMoves.Reset()
	freeNodeEvictions.Reset()
	if res.Found {
		freeNodeMoves.WithLabelValues().Set(float64(len(res.Moves)))
		freeNodeEvictions.WithLabelValues().Set(float64(res.Evictions))
	}
}

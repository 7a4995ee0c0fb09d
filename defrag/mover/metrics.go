package mover

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/gpudra/gpudra/internal/metricnames"
)

var (
	plans = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpudra_defrag_plans_total",
		Help: "Defragmentation plans made for waiting Workloads, by outcome (moved: carried out; fits: nothing to move; none: no plan within the bounds).",
	}, []string{"outcome"})
	evictions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpudra_defrag_evictions_total",
		Help: "Pods defragmentation asked the Eviction API to evict, by result (evicted; refused: a PodDisruptionBudget or the API server said no).",
	}, []string{"result"})
	requeued = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gpudra_defrag_workloads_requeued_total",
		Help: "Admitted Kueue Workloads defragmentation moved by setting their gpudra.dev/topology check to Retry.",
	})
)

func init() {
	metrics.Registry.MustRegister(plans, evictions, requeued)
	metrics.Registry.MustRegister(reportMetrics...)
}

// MetricNames are the names of the metrics this package serves, sorted.
func MetricNames() []string {
	return metricnames.Of(append([]prometheus.Collector{plans, evictions, requeued}, reportMetrics...)...)
}

package admission

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpudra_admission_decisions_total",
		Help: "Decisions of the gpudra.dev/topology admission check, by state (Ready, Retry, Rejected).",
	}, []string{"state"})
	decisionSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "gpudra_admission_decision_seconds",
		Help:    "Time to decide one workload's gpudra.dev/topology check, snapshot and planning included.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	})
	decisionWaitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "gpudra_admission_decision_wait_seconds",
		Help:    "Time a worker waited for the decision before its own (decisions are made one at a time).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	})
	writeSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "gpudra_admission_write_seconds",
		Help:    "Time to write a decision into the Workload's status, conflicts and their fresh reads included.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
	})
	writeConflicts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gpudra_admission_write_conflicts_total",
		Help: "Decision writes that met a newer Workload (written again on a fresh read, or dropped if the check moved on).",
	})
	podsPinned = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gpudra_admission_pods_pinned_total",
		Help: "Pods whose gpudra.dev/placement scheduling gate was lifted with their planned node.",
	})
)

func init() {
	metrics.Registry.MustRegister(decisions, decisionSeconds, decisionWaitSeconds, writeSeconds, writeConflicts, podsPinned)
}

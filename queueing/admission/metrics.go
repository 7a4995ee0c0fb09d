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
	podsPinned = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gpudra_admission_pods_pinned_total",
		Help: "Pods whose gpudra.dev/placement scheduling gate was lifted with their planned node.",
	})
)

func init() {
	metrics.Registry.MustRegister(decisions, decisionSeconds, podsPinned)
}

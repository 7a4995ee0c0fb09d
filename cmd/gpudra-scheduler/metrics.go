package main

import (
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/gpudra/gpudra/internal/buildinfo"
)

// buildInfo is gpudra_build_info on the registry kube-scheduler serves (legacyregistry),
// beside kubernetes_build_info.
var buildInfo = metrics.NewGaugeVec(&metrics.GaugeOpts{
	Name:           buildinfo.MetricName,
	Help:           buildinfo.MetricHelp,
	StabilityLevel: metrics.ALPHA,
}, buildinfo.LabelNames)

func init() {
	legacyregistry.MustRegister(buildInfo)
	buildInfo.WithLabelValues(buildinfo.LabelValues()...).Set(1)
}

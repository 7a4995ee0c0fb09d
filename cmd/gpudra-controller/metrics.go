package main

import (
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/gpudra/gpudra/internal/buildinfo"
)

// gpudra_build_info is on the registry the manager's metrics server serves.
func init() {
	crmetrics.Registry.MustRegister(buildinfo.NewCollector())
}

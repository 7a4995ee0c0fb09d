package kubeletplugin

import "github.com/gpudra/gpudra/internal/metricnames"

// MetricNames are the names of the metrics the plugin serves, sorted (histograms by their
// base name, without _bucket, _sum and _count).
func MetricNames() []string {
	return metricnames.Of(newMetrics(&state{}, nil).collectors...)
}

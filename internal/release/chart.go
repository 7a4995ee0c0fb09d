package release

import (
	"fmt"

	"github.com/gpudra/gpudra/internal/helmchart"
)

// ChartDir is the Helm chart's folder in the repository.
const ChartDir = "deployments/helm/gpudra"

// PackageChart packages the chart at chartDir through Helm's Go SDK as
// <out>/gpudra-<tag>.tgz, its version and appVersion both tag (Chart.yaml holds placeholders
// until then), and returns the archive's path.
func PackageChart(chartDir, tag, out string) (string, error) {
	archive, err := helmchart.Package(chartDir, tag, tag, out)
	if err != nil {
		return "", fmt.Errorf("packaging the chart %s: %w", chartDir, err)
	}
	return archive, nil
}

package release

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The packaged chart carries the release's version as its version and appVersion, the tag
// its images default to; the chart in the repository keeps its placeholder.
func TestPackagedChartHasTheReleaseVersion(t *testing.T) {
	out := t.TempDir()
	archive, err := PackageChart(filepath.Join("..", "..", ChartDir), "1.2.3-rc.1", out)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(archive) != "gpudra-1.2.3-rc.1.tgz" {
		t.Errorf("archive %s, want gpudra-1.2.3-rc.1.tgz", archive)
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatal("no gpudra/Chart.yaml in the package")
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "gpudra/Chart.yaml" {
			data, _ := io.ReadAll(tr)
			if err := yaml.Unmarshal(data, &chart); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if chart.Version != "1.2.3-rc.1" || chart.AppVersion != "1.2.3-rc.1" {
		t.Errorf("packaged Chart.yaml: version %q appVersion %q, want both 1.2.3-rc.1", chart.Version, chart.AppVersion)
	}
	if _, err := PackageChart(filepath.Join(out, "no-chart"), "1.2.3", out); err == nil || !strings.Contains(err.Error(), "no-chart") {
		t.Errorf("a missing chart: %v, want an error naming it", err)
	}
}

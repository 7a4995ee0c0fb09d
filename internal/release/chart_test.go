//go:build e2e

package release

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// helmPath is the helm binary lab/toolchain.sh caches (GPUDRA_HELM names another), as the
// chart tests find it.
func helmPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("GPUDRA_HELM"); p != "" {
		return p
	}
	out, err := exec.Command("bash", filepath.Join("..", "..", "lab", "toolchain.sh"), "--dir", "helm").Output()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(strings.TrimSpace(string(out)), "bin", "helm")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("helm is not cached at %s: build it once with lab/toolchain.sh helm", p)
	}
	return p
}

// The packaged chart carries the release's version as its version and appVersion, the tag
// its images default to; the chart in the repository keeps its placeholder.
func TestPackagedChartHasTheReleaseVersion(t *testing.T) {
	out := t.TempDir()
	archive, err := PackageChart(context.Background(), helmPath(t), filepath.Join("..", "..", ChartDir), "1.2.3-rc.1", out)
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
	if _, err := PackageChart(context.Background(), filepath.Join(out, "no-helm"), filepath.Join("..", "..", ChartDir), "1.2.3", out); err == nil || !strings.Contains(err.Error(), "lab/toolchain.sh helm") {
		t.Errorf("without helm: %v, want an error naming how to build it", err)
	}
}

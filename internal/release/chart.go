package release

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// ChartDir is the Helm chart's folder in the repository.
const ChartDir = "deployments/helm/gpudra"

// PackageChart packages the chart at chartDir with helm (the binary at helmPath) as
// <out>/gpudra-<tag>.tgz, its version and appVersion both tag (Chart.yaml holds placeholders
// until then), and returns the archive's path.
func PackageChart(ctx context.Context, helmPath, chartDir, tag, out string) (string, error) {
	if _, err := os.Stat(helmPath); err != nil {
		return "", fmt.Errorf("helm: %w (build it with lab/toolchain.sh helm, or name another with --helm)", err)
	}
	home, err := os.MkdirTemp("", "gpudra-helm-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(home)
	cmd := exec.CommandContext(ctx, helmPath, "package", chartDir, "--version", tag, "--app-version", tag, "--destination", out)
	// Keep helm away from the user's configuration and caches.
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("helm package %s: %w\n%s", chartDir, err, output.String())
	}
	archive := filepath.Join(out, "gpudra-"+tag+".tgz")
	if _, err := os.Stat(archive); err != nil {
		return "", fmt.Errorf("helm package wrote no %s:\n%s", archive, output.String())
	}
	return archive, nil
}

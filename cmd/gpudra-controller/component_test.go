package main

import (
	"strings"
	"testing"

	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/gpudra/gpudra/internal/buildinfo/buildinfotest"
)

// TestBuildInfoMetric: the registry the manager's metrics server serves has gpudra_build_info.
func TestBuildInfoMetric(t *testing.T) {
	buildinfotest.CheckMetric(t, crmetrics.Registry)
}

func TestVersionFlag(t *testing.T) {
	buildinfotest.CheckVersionFlag(t, newCommand(), "gpudra-controller")
}

func TestLoggingFlags(t *testing.T) {
	o := parse(t, "--logging-format=json", "-v=3")
	if o.logging.Format != "json" || o.logging.Verbosity != 3 {
		t.Errorf("--logging-format=json -v=3: format %q verbosity %d", o.logging.Format, o.logging.Verbosity)
	}
	if err := o.validate(); err != nil {
		t.Errorf("--logging-format=json -v=3: %v", err)
	}
	cmd := newCommand()
	cmd.SetArgs([]string{"--logging-format=xml", "--kubeconfig=/nonexistent"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), `--logging-format="xml"`) || !strings.Contains(err.Error(), "text, json") {
		t.Errorf("--logging-format=xml: err %v, want one naming the flag and the accepted text, json", err)
	}
}

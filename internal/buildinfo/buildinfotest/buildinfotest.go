// Package buildinfotest checks a binary's --version and a server's metrics registry for
// gpudra_build_info.
package buildinfotest

import (
	"bytes"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/gpudra/gpudra/internal/buildinfo"
)

// CheckMetric fails t unless g (a client_golang registry, or k8s.io/component-base/metrics'
// KubeRegistry, which gathers the same way) holds one gpudra_build_info gauge of value 1, labelled with
// this binary's buildinfo.LabelValues.
func CheckMetric(t *testing.T, g prometheus.Gatherer) {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	want := map[string]string{}
	for i, name := range buildinfo.LabelNames {
		want[name] = buildinfo.LabelValues()[i]
	}
	for _, f := range families {
		if f.GetName() != buildinfo.MetricName {
			continue
		}
		if f.GetType().String() != "GAUGE" || len(f.GetMetric()) != 1 {
			t.Fatalf("%s: type %v with %d series, want one gauge", buildinfo.MetricName, f.GetType(), len(f.GetMetric()))
		}
		m := f.GetMetric()[0]
		if v := m.GetGauge().GetValue(); v != 1 {
			t.Errorf("%s = %v, want 1", buildinfo.MetricName, v)
		}
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) != len(want) {
			t.Errorf("%s labels %v, want %v", buildinfo.MetricName, got, want)
		}
		for name, value := range want {
			if got[name] != value {
				t.Errorf("%s label %s = %q, want %q", buildinfo.MetricName, name, got[name], value)
			}
		}
		return
	}
	t.Fatalf("no %s among the %d metric families gathered", buildinfo.MetricName, len(families))
}

// CheckVersionFlag fails t unless cmd, run with --version, prints buildinfo.String(program).
// verflag's --version is one flag for the process, so it is set back to false afterwards.
func CheckVersionFlag(t *testing.T, cmd *cobra.Command, program string) {
	t.Helper()
	t.Cleanup(func() { _ = cmd.Flags().Set("version", "false") })
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--version"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if want := buildinfo.String(program) + "\n"; out.String() != want {
		t.Errorf("--version printed %q, want %q", out.String(), want)
	}
}

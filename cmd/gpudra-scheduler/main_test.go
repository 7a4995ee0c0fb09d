package main

import (
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/util/compatibility"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/metrics/legacyregistry"
	baseversion "k8s.io/component-base/version"

	"github.com/gpudra/gpudra/internal/buildinfo/buildinfotest"
)

// TestBuildInfoMetric: the registry kube-scheduler serves has gpudra_build_info.
func TestBuildInfoMetric(t *testing.T) {
	buildinfotest.CheckMetric(t, legacyregistry.DefaultGatherer)
}

func TestVersionFlagPrintsGpudrasVersion(t *testing.T) {
	buildinfotest.CheckVersionFlag(t, newCommand(), "gpudra-scheduler")
}

// TestKubeVersionIsKubernetes: kube-scheduler's binary and emulation version are the
// Kubernetes release it is built from, whatever gpudra's version is.
func TestKubeVersionIsKubernetes(t *testing.T) {
	newCommand()
	v := compatibility.DefaultComponentGlobalsRegistry.EffectiveVersionFor(basecompatibility.DefaultKubeComponent)
	if v == nil {
		t.Fatal("no kube effective version registered")
	}
	want := baseversion.DefaultKubeBinaryVersion
	if got := v.BinaryVersion().String(); got != want+".0" && got != want {
		t.Errorf("binary version %s, want %s", got, want)
	}
	if got := v.EmulationVersion().String(); got != want+".0" && got != want {
		t.Errorf("emulation version %s, want %s", got, want)
	}
}

func TestLoggingFlags(t *testing.T) {
	fs := newCommand().Flags()
	if err := fs.Parse([]string{"--logging-format=json", "-v=3"}); err != nil {
		t.Fatal(err)
	}
	if format, v := fs.Lookup("logging-format").Value.String(), fs.Lookup("v").Value.String(); format != "json" || v != "3" {
		t.Errorf("--logging-format=json -v=3: format %q, v %q", format, v)
	}
	cmd := newCommand()
	cmd.SetArgs([]string{"--logging-format=xml"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), `--logging-format="xml"`) || !strings.Contains(err.Error(), "text, json") {
		t.Errorf("--logging-format=xml: err %v, want one naming the flag and the accepted text, json", err)
	}
}

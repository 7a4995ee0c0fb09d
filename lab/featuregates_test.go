package lab

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/component-base/featuregate"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/internal/features"
)

// The lab's plugins, as processes or through the chart, run with every gpudra gate on:
// the H100 nodes' --mig=dynamic and the tests' alpha flags on the real node need them.
func TestLabTurnsOnEveryFeatureGate(t *testing.T) {
	u := &upper{file: &File{Kueue: KueueSpec{Enabled: true}}, ports: map[string]int{"controller-webhook": 9443, "metrics-n": 9400},
		layout: Layout{Root: "/lab"}, tc: &Toolchain{},
		state: &State{Server: "https://127.0.0.1:6443", Nodes: []Node{{Name: "n", Profile: "dgx-h100", MIG: "dynamic"}}}}
	var flag string
	for _, a := range u.pluginArgv("gpudra-kubelet-plugin", u.state.Nodes[0], "/kc") {
		if strings.HasPrefix(a, "--feature-gates=") {
			flag = a
		}
	}
	gate := features.New()
	fs := pflag.NewFlagSet("gpudra-kubelet-plugin", pflag.ContinueOnError)
	features.AddFlag(fs, gate)
	if err := fs.Parse([]string{flag}); err != nil {
		t.Fatalf("plugin's %q: %v", flag, err)
	}
	for _, name := range features.Known() {
		if !gate.Enabled(featuregate.Feature(name)) {
			t.Errorf("the lab's plugin runs with %s off (%q)", name, flag)
		}
	}

	data, err := u.chartValues()
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		FeatureGates map[string]bool `json:"featureGates"`
	}
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	for _, name := range features.Known() {
		if !v.FeatureGates[name] {
			t.Errorf("the lab's chart values leave %s off: %v", name, v.FeatureGates)
		}
	}
	if len(v.FeatureGates) != len(features.Known()) {
		t.Errorf("chart featureGates %v, want exactly the known gates %v", v.FeatureGates, features.Known())
	}
}

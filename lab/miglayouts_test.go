package lab

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/gpudra/gpudra/driver/miglayout"
)

// TestLabsRunTheChartsMIGDefaults: the default and the e2e lab run their plugins as the chart
// does (--mig=static with the chart's layouts), except on the nodes a lab file marks
// dynamic; each has MIG-capable nodes of both kinds, so `make demo` can show a node label
// applying a layout and the tests still find instances made per claim.
func TestLabsRunTheChartsMIGDefaults(t *testing.T) {
	repo, err := RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"lab.yaml", "e2e.yaml"} {
		f, err := LoadFile(repo + "/deployments/lab/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if f.MIG != "static" {
			t.Errorf("%s: mig %q, want static (the chart's default)", name, f.MIG)
		}
		static, dynamic := 0, 0
		for _, n := range f.Nodes() {
			switch {
			case n.Profile != "dgx-h100" && n.Profile != "dgx-a100":
			case n.MIG == "dynamic":
				dynamic++
			case migLayoutsApply(n.MIG):
				static++
			}
		}
		if dynamic == 0 {
			t.Errorf("%s: no MIG-capable node is marked mig: dynamic", name)
		}
		if name == "lab.yaml" && static == 0 {
			t.Errorf("%s: no MIG-capable node runs --mig=static, so the demo cannot apply a layout", name)
		}
	}
}

// TestPluginProcessesReadTheChartsLayouts: a plugin the lab runs as a process with static MIG
// (or the plugin's default) is given the chart's layouts; a dynamic one is not.
func TestPluginProcessesReadTheChartsLayouts(t *testing.T) {
	dir := t.TempDir()
	u := &upper{layout: Layout{Root: dir}, ports: map[string]int{"metrics-n": 9400}}
	if err := u.writeMIGLayouts(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(u.layout.MIGLayouts())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := miglayout.Parse(data); err != nil {
		t.Fatalf("the lab's layouts file: %v", err)
	}
	flag := "--mig-layouts=" + u.layout.MIGLayouts()
	for _, tc := range []struct {
		mig  string
		want bool
	}{{"", true}, {"static", true}, {"dynamic", false}, {"none", false}} {
		argv := u.pluginArgv("gpudra-kubelet-plugin", Node{Name: "n", Profile: "dgx-h100", MIG: tc.mig}, "/kc")
		if got := slices.Contains(argv, flag); got != tc.want {
			t.Errorf("--mig=%q: layouts flag given = %v, want %v (%s)", tc.mig, got, tc.want, strings.Join(argv, " "))
		}
	}
}

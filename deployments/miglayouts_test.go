package deployments_test

import (
	"testing"

	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver/miglayout"
)

// TestChartMIGLayoutsParse: the layouts the chart installs, as the lab hands them to its
// plugins, are a file the kubelet plugin accepts and name the layouts the docs and the demo use.
func TestChartMIGLayoutsParse(t *testing.T) {
	data, err := deployments.MIGLayouts()
	if err != nil {
		t.Fatal(err)
	}
	f, err := miglayout.Parse(data)
	if err != nil {
		t.Fatalf("the chart's migLayouts do not parse as --mig-layouts: %v", err)
	}
	for _, name := range []string{"all-disabled", "all-1g.10gb", "all-balanced"} {
		if _, ok := f.Layouts[name]; !ok {
			t.Errorf("the chart's migLayouts have no layout %s", name)
		}
	}
}

package topology

import (
	"reflect"
	"strings"
	"testing"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

func TestNetworkFromLabels(t *testing.T) {
	labels := map[string]map[string]string{
		"a1": {api.LabelBlock: "b1", api.LabelRack: "r1"},
		"a2": {api.LabelBlock: "b1", api.LabelRack: "r1", api.LabelToR: "tor-7"},
		"c1": {api.LabelBlock: "b2", api.LabelRack: "r1"}, // same rack name, other block
	}
	net, err := NetworkFromLabels(labels, DefaultLabelKeys)
	if err != nil {
		t.Fatal(err)
	}
	racks, err := net.Domains(LevelRack)
	if err != nil {
		t.Fatal(err)
	}
	want := []Domain{{Name: "b1/r1", Nodes: []string{"a1", "a2"}}, {Name: "b2/r1", Nodes: []string{"c1"}}}
	if !reflect.DeepEqual(racks, want) {
		t.Errorf("racks = %v, want %v (rack names are scoped by block)", racks, want)
	}
	if l, _ := net.Location("a1"); l.ToR != "r1" {
		t.Errorf("a node without a ToR label has ToR %q, want its rack", l.ToR)
	}
	if l, _ := net.Location("a2"); l.ToR != "tor-7" {
		t.Errorf("ToR = %q", l.ToR)
	}
	if _, err := net.Domains("row"); err == nil || !strings.Contains(err.Error(), "accepted values are block, rack, tor, hostname") {
		t.Errorf("unknown level: %v", err)
	}
	labels["x9"] = map[string]string{api.LabelBlock: "b1"}
	if _, err := NetworkFromLabels(labels, DefaultLabelKeys); err == nil || !strings.Contains(err.Error(), "x9") {
		t.Errorf("a node without a rack label: err = %v", err)
	}
}

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

func TestParseOversubscription(t *testing.T) {
	for v, want := range map[string]float64{"3:1": 3, "1.5:1": 1.5, "3": 3, "1": 1, " 4 : 2 ": 2, "1:2": 0.5} {
		if got, err := ParseOversubscription(v); err != nil || got != want {
			t.Errorf("ParseOversubscription(%q) = %v, %v, want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"", "three", "3:0", "0", "-1", "3:1:1", "NaN", "1e9", "0.001"} {
		if _, err := ParseOversubscription(v); err == nil || !strings.Contains(err.Error(), "accepted values are a ratio of downlink to uplink bandwidth from 0.01 to 1000") {
			t.Errorf("ParseOversubscription(%q): err = %v", v, err)
		}
	}
	if got := FormatOversubscription(1.5); got != "1.5:1" {
		t.Errorf("FormatOversubscription(1.5) = %q", got)
	}
}

func TestOversubscriptionLabels(t *testing.T) {
	labels := map[string]map[string]string{
		"a1": {api.LabelBlock: "b1", api.LabelRack: "r1", api.LabelToROversubscription: "3", api.LabelBlockOversubscription: "1.5"},
		"a2": {api.LabelBlock: "b1", api.LabelRack: "r1"},
	}
	net, err := NetworkFromLabels(labels, DefaultLabelKeys)
	if err != nil {
		t.Fatal(err)
	}
	if got := [3]float64{net.Oversubscription("a1", LevelToR), net.Oversubscription("a1", LevelBlock), net.Oversubscription("a2", LevelToR)}; got != [3]float64{3, 1.5, 0} {
		t.Errorf("ToR, spine of a1 and ToR of a2 = %v, want 3, 1.5 and 0 (unknown)", got)
	}
	labels["a2"][api.LabelToROversubscription] = "lots"
	if _, err := NetworkFromLabels(labels, DefaultLabelKeys); err == nil || !strings.Contains(err.Error(), "node a2: label topology.gpudra.dev/tor-oversubscription: oversubscription \"lots\"") {
		t.Errorf("a bad ratio label: err = %v", err)
	}
}

package network

import (
	"k8s.io/apimachinery/pkg/api/equality"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/topology"
)

// FuzzParseFile parses any topology file: an error, or a file whose every node gets
// valid labels and which, written back as YAML, parses the same.
func FuzzParseFile(f *testing.F) {
	f.Add([]byte(file))
	f.Add([]byte("blocks:\n- name: b1\n  racks:\n  - name: r1\n    nodes: [a]\n  - name: r2\n    nodes: [a]\n"))
	f.Add([]byte("blocks:\n- name: b\n  racks:\n  - {name: r, tor: t, nodes: [n1.example.com]}\n---\n"))
	f.Add([]byte("blocks:\n- name: b\n  oversubscription: 2\n  racks:\n  - name: r\n    tors:\n    - {name: t, oversubscription: 3:1, nodes: [n]}\n"))
	f.Add([]byte("blocks: []\n---\nblocks: []\n"))
	f.Add([]byte("blocks: [{name: &a b, racks: [{name: *a, nodes: [*a]}]}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		parsed, err := ParseFile(data)
		if err != nil {
			return
		}
		keys := topology.DefaultLabelKeys
		labels := parsed.Labels(keys.Block, keys.Rack, keys.ToR)
		for node, ls := range labels {
			if msgs := validation.IsDNS1123Subdomain(node); len(msgs) > 0 {
				t.Fatalf("node %q: %v", node, msgs)
			}
			for k, v := range ls {
				if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 || v == "" {
					t.Fatalf("node %s: label %s=%q: %v", node, k, v, msgs)
				}
			}
		}
		out, err := yaml.Marshal(parsed)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseFile(out)
		if err != nil {
			t.Fatalf("written back:\n%s\ndoes not parse: %v", out, err)
		}
		// An empty list written back is left out and reads as none: the same file.
		if !equality.Semantic.DeepEqual(again, parsed) {
			t.Fatalf("written back:\n%s\nparses as %+v, want %+v", out, again, parsed)
		}
	})
}

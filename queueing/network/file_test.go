package network

import (
	"strings"
	"testing"
)

func TestParseFileRefuses(t *testing.T) {
	tests := []struct {
		name, data, want string
	}{
		{"a second document", file + "---\nblocks: []\n",
			"topology file (topology.yaml): 2 YAML documents: a second one follows a --- separator, and the topology file is one YAML document"},
		{"a file over the limit", file + "#" + strings.Repeat(" ", MaxFileBytes) + "\n",
			"over the 1048576-byte (1 MiB) limit"},
		{"a block listed twice", "blocks:\n- name: b1\n- name: b1\n",
			"blocks[1].name: block b1 is already blocks[0]; list each block once"},
		{"a rack listed twice in a block", "blocks:\n- name: b1\n  racks:\n  - name: r1\n  - name: r1\n",
			"blocks[0].racks[1].name: rack r1 is already blocks[0].racks[0]"},
		{"a rack name that is no label value", "blocks:\n- name: b1\n  racks:\n  - name: rack 1\n",
			`blocks[0].racks[0].name: "rack 1" is not a node label value: a valid label must be an empty string or consist of alphanumeric characters`},
		{"a ToR name that is no label value", "blocks:\n- name: b1\n  racks:\n  - name: r1\n    tor: " + strings.Repeat("t", 64) + "\n",
			"blocks[0].racks[0].tor: \"" + strings.Repeat("t", 64) + "\" is not a node label value: must be no more than 63 bytes"},
		{"a ratio that is no ratio", "blocks:\n- name: b1\n  racks:\n  - name: r1\n    oversubscription: three\n",
			`blocks[0].racks[0].oversubscription: oversubscription "three": accepted values are a ratio of downlink to uplink bandwidth from 0.01 to 1000, as "3:1" or a number (3; 1 is non-blocking)`},
		{"a spine ratio with no uplink", "blocks:\n- name: b1\n  oversubscription: \"3:0\"\n",
			`blocks[0].oversubscription: oversubscription "3:0": accepted values are`},
		{"a negative ToR ratio", "blocks:\n- name: b1\n  racks:\n  - name: r1\n    tors:\n    - {name: t1, oversubscription: -2, nodes: [a]}\n",
			`blocks[0].racks[0].tors[0].oversubscription: oversubscription "-2": accepted values are`},
		{"a rack with tors and nodes of its own", "blocks:\n- name: b1\n  racks:\n  - name: r1\n    nodes: [a]\n    tors:\n    - {name: t1, nodes: [b]}\n",
			"blocks[0].racks[0]: tors and tor, oversubscription or nodes: list the nodes under each of tors"},
		{"a ToR listed twice in a rack", "blocks:\n- name: b1\n  racks:\n  - name: r1\n    tors:\n    - {name: t1, nodes: [a]}\n    - {name: t1, nodes: [b]}\n",
			"blocks[0].racks[0].tors[1].name: ToR t1 is already tors[0]; list each ToR of a rack once"},
		{"a node under two ToRs", "blocks:\n- name: b1\n  racks:\n  - name: r1\n    tors:\n    - {name: t1, nodes: [a]}\n    - {name: t2, nodes: [a]}\n",
			"blocks[0].racks[0].tors[1].nodes[0]: node a is already in blocks[0].racks[0].tors[0].nodes[0]"},
		{"an empty node name", "blocks:\n- name: b1\n  racks:\n  - name: r1\n    nodes: [n1, '']\n",
			`blocks[0].racks[0].nodes[1]: "" is not a node name: a lowercase RFC 1123 subdomain`},
		{"a node name in capitals", "blocks:\n- name: b1\n  racks:\n  - name: r1\n    nodes: [GPU-1]\n",
			`blocks[0].racks[0].nodes[0]: "GPU-1" is not a node name: a lowercase RFC 1123 subdomain`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseFile([]byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseFile error:\n%v\nwant it to contain:\n%s", err, tc.want)
			}
		})
	}
}

func TestParseFileAccepts(t *testing.T) {
	for name, data := range map[string]string{
		"the example":          file,
		"a trailing separator": file + "---\n",
		"a leading separator":  "---\n" + file,
		"ratios as strings and numbers, a rack of two ToRs": "blocks:\n- name: b1\n  oversubscription: 1\n  racks:\n  - name: r1\n    oversubscription: 3:1\n    nodes: [n1]\n" +
			"  - name: r2\n    tors:\n    - {name: t1, oversubscription: \"1.5:1\", nodes: [n2]}\n    - {name: t2, oversubscription: 2.5, nodes: [n3]}\n",
		"the same rack name in two blocks": "blocks:\n- name: b1\n  racks:\n  - name: r1\n    nodes: [n1]\n" +
			"- name: b2\n  racks:\n  - name: r1\n    nodes: [n2]\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseFile([]byte(data)); err != nil {
				t.Error(err)
			}
		})
	}
}

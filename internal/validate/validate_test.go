package validate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckFiles(t *testing.T) {
	h100, err := OpenNode("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		file string
		opts Options
		// want are, in order, substrings of the problems' lines (FILE:doc N: path: message);
		// none for a valid file.
		want []string
	}{
		{name: "claims, templates and classes with valid configs pass", file: "valid-claims.yaml"},
		{name: "a config on its own passes", file: "valid-config.yaml"},
		{name: "a JSON List of claims passes", file: "valid-list.json"},
		{name: "layouts pass without a node", file: "valid-layouts.yaml"},
		{name: "layouts the node can hold pass against it", file: "valid-layouts.yaml", opts: Options{Node: h100}},
		{name: "a topology file passes", file: "valid-topology.yaml"},
		{name: "ConfigMaps of a topology file and MIG layouts pass", file: "valid-configmaps.yaml"},
		{
			name: "the files in ConfigMaps are checked by their parsers",
			file: "invalid-configmaps.yaml",
			want: []string{"F:doc 1: data[topology.yaml]: topology file", "Not_A_Node", "F:doc 2: data[mig-layouts.yaml]: version"},
		},
		{name: "a forced kind is checked as that kind", file: "valid-topology.yaml", opts: Options{Kind: KindTopology}},
		{
			name: "claim problems name their document and field",
			file: "invalid-claims.yaml",
			want: []string{
				"F:doc 1: spec.devices.requests[0].exactly.deviceClassname: Forbidden: unknown field in ResourceClaim",
				"F:doc 2: spec.devices.config[0].opaque.parameters.sharing.strategy: Unsupported value: \"Bogus\"",
				"F:doc 3: metadata.name: Invalid value: \"Bad_Name\"",
				"F:doc 3: spec.devices.requests[0].exactly.selectors[0].cel.expression: Invalid value",
				"F:doc 3: spec.devices.requests[0].exactly.allocationMode: Unsupported value: \"Some\": supported values: \"ExactCount\", \"All\"",
				"F:doc 3: spec.devices.config[0].requests[0]: Invalid value: \"gpus\": names no request of the claim (its requests: gpu)",
				"F:doc 4: spec.devices.config[0].opaque.parameters.limits.policy: Invalid value: \"Guaranteed\"",
			},
		},
		{
			name: "a DeviceClass's config is decoded strictly and validated",
			file: "invalid-deviceclass.yaml",
			want: []string{
				"F:doc 1: metadata.namespace: Forbidden: not allowed on this type",
				"F:doc 1: spec.config[0].opaque.parameters.sharing.extra: Forbidden: unknown field in GpuConfig",
			},
		},
		{
			name: "an object of another resource.k8s.io version names the accepted one",
			file: "invalid-apiversion.yaml",
			want: []string{`F:doc 1: apiVersion: Unsupported value: "resource.k8s.io/v1beta2": supported values: "resource.k8s.io/v1"`},
		},
		{
			name: "a key written twice is refused, not overwritten",
			file: "invalid-duplicate-key.yaml",
			want: []string{`F:doc 1: not valid YAML`, `"name" already set`},
		},
		{
			name: "a config on its own is validated",
			file: "invalid-config.yaml",
			want: []string{"F:doc 1: sharing.mps.defaultPinnedDeviceMemoryLimit: Invalid value: \"1Ki\""},
		},
		{
			name: "a layout file with an unknown field is refused by the plugin's parser",
			file: "invalid-layouts.yaml",
			want: []string{"F:doc 1: mig-configs.broken[0]"},
		},
		{
			name: "layouts are checked against the node's indexes, profiles and slices",
			file: "invalid-layouts-node.yaml",
			opts: Options{Node: h100},
			want: []string{
				"F:doc 1: mig-configs.a100-profile: on node dgx-h100: GPU 0",
				"1g.5gb",
				"F:doc 1: mig-configs.past-the-node[0].devices[0]: node dgx-h100 has no GPU 8; its GPU indexes are 0, 1, 2, 3, 4, 5, 6, 7",
				"F:doc 1: mig-configs.past-the-node[0].devices[1]: node dgx-h100 has no GPU 99",
				"F:doc 1: mig-configs.too-big: on node dgx-h100: GPU 1",
			},
		},
		{
			name: "a count no GPU holds is refused before anything is expanded",
			file: "invalid-layouts-count.yaml",
			opts: Options{Node: h100},
			want: []string{"F:doc 1: mig-configs.too-many[0].mig-devices.1g.10gb: 2000000000 instances; a GPU holds at most 7 MIG instances"},
		},
		{
			name: "only the named layout is checked against the node",
			file: "invalid-layouts-node.yaml",
			opts: Options{Node: h100, Layout: "past-the-node"},
			want: []string{"F:doc 1: mig-configs.past-the-node[0].devices[0]: node dgx-h100 has no GPU 8"},
		},
		{
			name: "the named layout selecting none of the node's GPUs is a problem",
			file: "invalid-layouts-node.yaml",
			opts: Options{Node: h100, Layout: "past-the-node"},
			want: []string{"F:doc 1: mig-configs.past-the-node: selects none of node dgx-h100's GPUs (8× NVIDIA H100 80GB HBM3 (0x"},
		},
		{
			name: "a layout the file does not have is named with the ones it has",
			file: "valid-layouts.yaml",
			opts: Options{Layout: "all-balanced"},
			want: []string{`F:doc 1: mig-configs: no MIG layout "all-balanced"; the layouts are all-disabled, h100-mixed`},
		},
		{
			name: "a topology file with a node twice is refused by the controller's parser",
			file: "invalid-topology.yaml",
			want: []string{"F:doc 1: topology file", "blocks[0].racks[0].nodes[1]"},
		},
		{
			name: "a document of no known kind asks for --kind, a list is not a document",
			file: "invalid-unknown.yaml",
			want: []string{"F:doc 2: cannot tell what this document is", "F:doc 3: not an object"},
		},
		{
			name: "a forced kind that does not fit is refused",
			file: "valid-claims.yaml",
			opts: Options{Kind: KindTopology},
			want: []string{"F:doc 1: topology file"},
		},
		{
			name: "a lab file without the lab's parser is a problem, never a pass",
			file: "valid-topology.yaml",
			opts: Options{Kind: KindLab},
			want: []string{"F:doc 1: lab files are not checked here"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			res := Check(data, tc.opts)
			var lines []string
			for _, p := range res.Problems {
				lines = append(lines, p.Format("F"))
			}
			if len(tc.want) == 0 && len(lines) > 0 {
				t.Fatalf("a valid file has problems:\n%s", strings.Join(lines, "\n"))
			}
			all := strings.Join(lines, "\n")
			at := 0
			for _, w := range tc.want {
				k := strings.Index(all[at:], w)
				if k < 0 {
					t.Fatalf("problems lack %q (in this order):\n%s", w, all)
				}
				at += k + len(w)
			}
		})
	}
}

func TestCheckBoundsInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		data string
		want string
	}{
		{"an empty file is not valid", "", "no documents"},
		{"a file of comments is not valid", "# nothing\n---\n", "no documents"},
		{"a file over the limit is refused unread", strings.Repeat("a", MaxFileBytes+1), "over the"},
		{"YAML aliases that expand past the parser's budget are refused", billionLaughs(), "doc 1"},
		{"an unknown kind is refused", "a: 1", "kind \"x\" is not one of"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{}
			if strings.HasPrefix(tc.name, "an unknown kind") {
				opts.Kind = "x"
			}
			res := Check([]byte(tc.data), opts)
			if len(res.Problems) == 0 {
				t.Fatal("no problem reported")
			}
			if got := res.Problems[0].Format("F"); !strings.Contains(got, tc.want) {
				t.Errorf("problem %q does not say %q", got, tc.want)
			}
		})
	}
}

// billionLaughs is a small YAML document whose aliases expand to billions of nodes.
func billionLaughs() string {
	var b strings.Builder
	b.WriteString("a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n")
	prev := "a"
	for _, name := range []string{"b", "c", "d", "e", "f", "g", "h", "i"} {
		b.WriteString(name + ": &" + name + " [")
		for k := range 9 {
			if k > 0 {
				b.WriteString(",")
			}
			b.WriteString("*" + prev)
		}
		b.WriteString("]\n")
		prev = name
	}
	return b.String()
}

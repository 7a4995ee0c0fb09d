package convert

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// FuzzConvert: no input panics or hangs; an input that converts gives output that
// parses, and every pod-like object whose containers name an nvidia.com resource is
// either converted or named in the report.
func FuzzConvert(f *testing.F) {
	for _, g := range goldenCases {
		in, _ := g.run(&testing.T{})
		f.Add(in, g.opts.Claims)
	}
	for _, s := range []string{
		podWithGPU(`"1e30"`), podWithGPU(`"9223372036854775808"`), podWithGPU(`0`), podWithGPU(`-1`),
		"kind: Pod\nx: &a [*a]\n",
		"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nx: &l {limits: {nvidia.com/gpu: 1}}\nspec:\n  containers:\n  - {name: a, resources: *l}\n  - {name: b, resources: {<<: *l}}\n",
		"apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: " + strings.Repeat("n", 300) + "}\n  spec: {containers: [{name: a, resources: {limits: {nvidia.com/gpu: 1}}}]}\n",
		"apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c}\nspec: {devices: {requests: [{name: a, exactly: &e {deviceClassName: gpu.nvidia.com}}, {name: b, exactly: {<<: *e, capacity: {requests: {memory: 1Gi}}}}]}}\n",
		"apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c}\nspec: {devices: {requests: [{name: a, exactly: {deviceClassName: mig.nvidia.com, selectors: [{cel: {expression: 'device.attributes[\"gpu.nvidia.com\"].uuid == \"MIG-x\" // x'}}]}}]}}\n",
		"kind: Pod\nspec: {containers: [{resources: {limits: {nvidia.com/gpu: 1}}}]}\n",
		"a: b\n---\n- c\n", "\x00", "%YAML 1.1\n---\nkind: Pod\n", "? [a]\n: b\n",
	} {
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, in []byte, claims bool) {
		res, err := Convert(in, Options{Claims: claims, Classes: goldenClasses()})
		if err != nil {
			return
		}
		dec := yaml.NewDecoder(bytes.NewReader(res.Output))
		for {
			var n yaml.Node
			if err := dec.Decode(&n); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("the output does not parse: %v\n%s", err, res.Output)
			}
		}
		docs, _, err := decodeAll(in)
		if err != nil {
			t.Fatalf("converted, but the input does not decode again: %v", err)
		}
		reported := map[string]bool{}
		for _, e := range res.Entries {
			reported[e.Object] = true
		}
		for i, d := range docs {
			for _, o := range objectsOf(d, i) {
				if hasNvidiaResource(o.node, 0) && !reported[o.id()] {
					t.Fatalf("%s names an nvidia.com resource and is not in the report %v", o.id(), res.Entries)
				}
			}
		}
	})
}

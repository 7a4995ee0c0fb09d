package miglayout

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// Limits of a layout file. Every one is far above what a real file needs (NVIDIA's own
// default configuration is about 40 layouts of at most 6 entries), and together they bound
// what reading a file, and applying one of its layouts, costs.
const (
	// MaxFileBytes is the largest layout file read.
	MaxFileBytes = 1 << 20
	// MaxDepth is how deeply the file's mappings and lists may nest; a layout file needs 5.
	MaxDepth = 8
	// MaxLayouts is the most layouts a file may name.
	MaxLayouts = 1024
	// MaxEntries is the most entries a layout may have.
	MaxEntries = 64
	// MaxListed is the most GPU indices an entry's devices, and the most values its
	// device-filter, may list.
	MaxListed = 64
	// MaxGPUIndex is the highest GPU index an entry's devices may name.
	MaxGPUIndex = 1023
	// MaxInstancesPerGPU is the most MIG instances a GPU can hold (7 compute slices on
	// every MIG-capable GPU), so the most an entry's mig-devices may count, per profile
	// and together.
	MaxInstancesPerGPU = 7
)

// toJSON reads a YAML (or JSON) document as JSON, refusing what the layout format has no
// use for and what would make reading it costly: YAML anchors, aliases and merge keys, a
// mapping that repeats a key, keys that are not plain values, and nesting deeper than
// MaxDepth. Errors name the field's path. Keys are kept as written, so that two keys are
// the same in the JSON exactly when they are the same in the file.
func toJSON(data []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("not YAML: %w", err)
	}
	if err := checkNode(&doc, "", 0); err != nil {
		return nil, err
	}
	if len(doc.Content) == 0 {
		return []byte("null"), nil
	}
	v, err := plain(doc.Content[0])
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// plain is a checked node as the values encoding/json writes.
func plain(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for k := 0; k+1 < len(n.Content); k += 2 {
			v, err := plain(n.Content[k+1])
			if err != nil {
				return nil, err
			}
			m[n.Content[k].Value] = v
		}
		return m, nil
	case yaml.SequenceNode:
		list := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := plain(c)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		return list, nil
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return n.Value, nil // a value YAML cannot type (a bad !!binary, ...): its text
	}
	if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
		return n.Value, nil // JSON has no NaN or infinity: their text
	}
	return v, nil
}

func checkNode(n *yaml.Node, path string, depth int) error {
	where := path
	if where == "" {
		where = "the file"
	}
	if depth > MaxDepth {
		return fmt.Errorf("%s: nested more than %d levels deep; a layout file needs 5", where, MaxDepth)
	}
	if n.Kind == yaml.AliasNode {
		return fmt.Errorf("%s: YAML aliases (*%s) are not accepted; write the value out", where, n.Value)
	}
	if n.Anchor != "" {
		return fmt.Errorf("%s: YAML anchors (&%s) are not accepted; write each value out", where, n.Anchor)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := checkNode(c, path, depth); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for k, c := range n.Content {
			if err := checkNode(c, path+"["+strconv.Itoa(k)+"]", depth+1); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		seen := make(map[string]int, len(n.Content)/2) // key → its line
		for k := 0; k+1 < len(n.Content); k += 2 {
			key, value := n.Content[k], n.Content[k+1]
			if key.Kind == yaml.AliasNode || key.Anchor != "" {
				return fmt.Errorf("%s: YAML anchors and aliases are not accepted; write each key out", where)
			}
			if key.Kind != yaml.ScalarNode {
				return fmt.Errorf("%s: a key is a %s; keys are names or numbers", where, kindName(key))
			}
			if key.Tag == "!!merge" {
				return fmt.Errorf("%s: YAML merge keys (<<) are not accepted; write each field out", where)
			}
			child := key.Value
			if path != "" {
				child = path + "." + key.Value
			}
			if line, ok := seen[key.Value]; ok {
				return fmt.Errorf("%s: the key is given twice (lines %d and %d); give each key once", child, line, key.Line)
			}
			seen[key.Value] = key.Line
			if err := checkNode(value, child, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	}
	return "value"
}

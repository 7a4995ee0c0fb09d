package convert

import (
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The converter edits manifests as YAML node trees, so that key order, comments and
// quoting of everything it does not change come out as they went in.

// get returns the value of key in mapping m, or nil.
func get(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// index maps m's keys to their values, for look-ups in mappings of any size.
func index(m *yaml.Node) map[string]*yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	out := make(map[string]*yaml.Node, len(m.Content)/2)
	for i := 0; i+1 < len(m.Content); i += 2 {
		if _, dup := out[m.Content[i].Value]; !dup {
			out[m.Content[i].Value] = m.Content[i+1]
		}
	}
	return out
}

// getPath follows keys from m.
func getPath(m *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		m = get(m, k)
	}
	return m
}

// set replaces the value of key in m, or appends key.
func set(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, str(key), v)
}

// del removes key from m.
func del(m *yaml.Node, key string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content = append(m.Content[:i], m.Content[i+2:]...)
			return
		}
	}
}

// keys lists m's keys in order.
func keys(m *yaml.Node) []string {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	var out []string
	for i := 0; i+1 < len(m.Content); i += 2 {
		out = append(out, m.Content[i].Value)
	}
	return out
}

// scalar returns n's value when n is a scalar.
func scalar(n *yaml.Node) (string, bool) {
	if n == nil || n.Kind != yaml.ScalarNode {
		return "", false
	}
	return n.Value, true
}

// text is the scalar value of key in m, or "".
func text(m *yaml.Node, key string) string {
	s, _ := scalar(get(m, key))
	return s
}

// items returns the elements of sequence n (nil when n is not a sequence).
func items(n *yaml.Node) []*yaml.Node {
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil
	}
	return n.Content
}

func isMap(n *yaml.Node) bool { return n != nil && n.Kind == yaml.MappingNode }

// setScalar changes a scalar's value and keeps its style; a value that must be quoted
// to stay a string is quoted.
func setScalar(n *yaml.Node, v string) {
	n.Value = v
	n.Tag = "!!str"
}

func str(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}

func integer(i int64) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(i, 10)}
}

// mapping builds a mapping from key, value pairs (values are nodes or strings).
func mapping(kv ...any) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for i := 0; i+1 < len(kv); i += 2 {
		var v *yaml.Node
		switch x := kv[i+1].(type) {
		case *yaml.Node:
			v = x
		case string:
			v = str(x)
		}
		m.Content = append(m.Content, str(kv[i].(string)), v)
	}
	return m
}

func sequence(elems ...*yaml.Node) *yaml.Node {
	return &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: elems}
}

// path is a field path as Kubernetes writes it: spec.devices.requests[0].name.
type path string

func (p path) child(name string) path {
	if p == "" {
		return path(name)
	}
	if strings.ContainsAny(name, "./") {
		return path(string(p) + "[" + name + "]")
	}
	return path(string(p) + "." + name)
}

func (p path) index(i int) path { return path(string(p) + "[" + strconv.Itoa(i) + "]") }

package convert

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"
)

// Bounds on what the converter reads, so that no input makes it run out of memory or
// time: a YAML node costs about 200 bytes once decoded, and the tightest YAML spends two
// bytes of input on one.
const (
	// MaxInputBytes is the largest input read.
	MaxInputBytes = 16 << 20
	// MaxNodes bounds the YAML nodes of the input in all, aliases written out.
	MaxNodes = 2_000_000
	// MaxDepth bounds the nesting of mappings and sequences.
	MaxDepth = 256
)

// ReadInput reads r to its end, or fails once more than MaxInputBytes have come.
func ReadInput(r io.Reader) ([]byte, error) {
	in, err := io.ReadAll(io.LimitReader(r, MaxInputBytes+1))
	if err != nil {
		return nil, err
	}
	if len(in) > MaxInputBytes {
		return nil, tooLarge()
	}
	return in, nil
}

func tooLarge() error {
	return fmt.Errorf("input larger than %d MiB: split it and convert the parts one by one", MaxInputBytes>>20)
}

// decodeAll decodes a stream of YAML documents, each a mapping, and writes out its
// aliases and merge keys (see expand). expanded lists the documents whose aliases or
// merge keys were written out.
func decodeAll(input []byte) (docs []*yaml.Node, expanded map[int]bool, err error) {
	if len(input) > MaxInputBytes {
		return nil, nil, tooLarge()
	}
	dec := yaml.NewDecoder(bytes.NewReader(input))
	expanded = map[int]bool{}
	nodes := 0
	for n := 1; ; n++ {
		var d yaml.Node
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return docs, expanded, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", n, err)
		}
		if len(d.Content) == 0 || (d.Content[0].Kind == yaml.ScalarNode && d.Content[0].Tag == "!!null") {
			continue
		}
		s := &scan{nodes: nodes}
		if err := s.walk(&d, 0, ""); err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", n, err)
		}
		doc := &d
		hadAliases := s.aliases
		if hadAliases {
			x := &expander{nodes: nodes, active: map[*yaml.Node]bool{}}
			if doc, err = x.expand(&d, 0); err != nil {
				return nil, nil, fmt.Errorf("document %d: %w", n, err)
			}
			// Merging can bring duplicate keys together: check the result again.
			s = &scan{nodes: nodes}
			if err := s.walk(doc, 0, ""); err != nil {
				return nil, nil, fmt.Errorf("document %d: %w", n, err)
			}
		}
		nodes = s.nodes
		if doc.Content[0].Kind != yaml.MappingNode {
			return nil, nil, fmt.Errorf("document %d: not a Kubernetes object (want a mapping with apiVersion and kind)", n)
		}
		if hadAliases {
			expanded[len(docs)] = true
		}
		docs = append(docs, doc)
	}
}

// scan checks a document's size, depth and keys, and notes whether it has aliases or
// merge keys.
type scan struct {
	nodes   int
	aliases bool
}

func (s *scan) walk(n *yaml.Node, depth int, p path) error {
	s.nodes++
	if s.nodes > MaxNodes {
		return fmt.Errorf("more than %d YAML nodes in the input: split it and convert the parts one by one", MaxNodes)
	}
	if depth > MaxDepth {
		return fmt.Errorf("%s: nested more than %d deep", orTop(p), MaxDepth)
	}
	switch n.Kind {
	case yaml.AliasNode:
		s.aliases = true
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := s.walk(c, depth, p); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if err := s.walk(c, depth+1, p.index(i)); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		seen := make(map[string]bool, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			switch {
			case isMergeKey(k):
				s.aliases = true
			case k.Kind == yaml.AliasNode:
				s.aliases = true
			case k.Kind != yaml.ScalarNode:
				return fmt.Errorf("%s: line %d: a key that is not a string; Kubernetes objects have string keys only", orTop(p), k.Line)
			case seen[k.Value]:
				return fmt.Errorf("%s: line %d: key %q appears twice in one mapping", orTop(p), k.Line, k.Value)
			}
			seen[k.Value] = true
			if err := s.walk(k, depth+1, p); err != nil {
				return err
			}
			if err := s.walk(n.Content[i+1], depth+1, p.child(k.Value)); err != nil {
				return err
			}
		}
	}
	return nil
}

func orTop(p path) string {
	if p == "" {
		return "the document"
	}
	return string(p)
}

// isMergeKey: a plain << key, which YAML 1.1 reads as merging mappings into this one.
func isMergeKey(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Tag == "!!merge" && k.Value == "<<"
}

// expander writes out a document's aliases and merge keys: each alias becomes a copy of
// its anchor's node, and a mapping with << gets the keys of the mappings it merges that it
// does not have itself, as Kubernetes' YAML reader does. Afterwards no two places of the
// tree share a node, so a change to one field of a converted object cannot change
// another, and the converter sees every field where Kubernetes would. Anchors are dropped.
type expander struct {
	nodes int
	// active holds the nodes being copied, to tell an alias to its own ancestor.
	active map[*yaml.Node]bool
}

func (x *expander) expand(n *yaml.Node, depth int) (*yaml.Node, error) {
	x.nodes++
	if x.nodes > MaxNodes {
		return nil, fmt.Errorf("aliases write out to more than %d YAML nodes", MaxNodes)
	}
	if depth > MaxDepth {
		return nil, fmt.Errorf("aliases write out to mappings nested more than %d deep", MaxDepth)
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil || x.active[n.Alias] {
			return nil, fmt.Errorf("line %d: alias *%s refers to a node that contains it", n.Line, n.Value)
		}
		c, err := x.expand(n.Alias, depth)
		if err != nil {
			return nil, err
		}
		// The copy sits where the alias was.
		c.Line, c.Column = n.Line, n.Column
		return c, nil
	}
	if x.active[n] {
		return nil, fmt.Errorf("line %d: a node that contains itself", n.Line)
	}
	x.active[n] = true
	defer delete(x.active, n)
	c := *n
	c.Anchor, c.Alias = "", nil
	if len(n.Content) == 0 {
		c.Content = nil
		return &c, nil
	}
	c.Content = make([]*yaml.Node, 0, len(n.Content))
	for _, e := range n.Content {
		ec, err := x.expand(e, depth+1)
		if err != nil {
			return nil, err
		}
		c.Content = append(c.Content, ec)
	}
	if c.Kind == yaml.MappingNode {
		if err := merge(&c); err != nil {
			return nil, err
		}
	}
	return &c, nil
}

// merge replaces the << keys of mapping m by the keys they merge: a mapping, or a list
// of mappings, the earlier ones first; keys of m itself win over merged ones.
func merge(m *yaml.Node) error {
	has := false
	own := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := m.Content[i]; isMergeKey(k) {
			has = true
		} else {
			own[k.Value] = true
		}
	}
	if !has {
		return nil
	}
	var out []*yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if !isMergeKey(k) {
			out = append(out, k, v)
			continue
		}
		sources := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			sources = v.Content
		}
		for _, src := range sources {
			if src.Kind != yaml.MappingNode {
				return fmt.Errorf("line %d: << merges a mapping or a list of mappings, not this", k.Line)
			}
			for j := 0; j+1 < len(src.Content); j += 2 {
				sk := src.Content[j]
				if own[sk.Value] {
					continue
				}
				own[sk.Value] = true
				out = append(out, sk, src.Content[j+1])
			}
		}
	}
	m.Content = out
	return nil
}

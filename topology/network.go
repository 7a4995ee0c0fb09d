package topology

import (
	"fmt"
	"sort"
	"strings"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// Network levels, outermost first. A block holds racks, a rack has one top-of-rack
// switch (ToR) and holds hosts.
const (
	LevelBlock    = "block"
	LevelRack     = "rack"
	LevelHostname = "hostname"
)

// Levels lists the accepted level names, outermost first.
var Levels = []string{LevelBlock, LevelRack, LevelHostname}

// Node labels gpudra reads and writes for a node's place in the network.
const (
	LabelHostname = "kubernetes.io/hostname"
)

// Location is a node's place in the network.
type Location struct {
	Block, Rack, ToR, Host string
}

// Network maps nodes to their location (and keeps their labels for node selectors).
type Network struct {
	locations map[string]Location
	labels    map[string]map[string]string
}

// LabelKeys says which node labels hold the block and rack; ToR defaults to the rack.
type LabelKeys struct {
	Block, Rack, ToR string
}

// DefaultLabelKeys are gpudra's own labels.
var DefaultLabelKeys = LabelKeys{Block: api.LabelBlock, Rack: api.LabelRack, ToR: api.LabelToR}

// NetworkFromLabels builds the network from node labels. A node without a rack label is an
// error naming the node and the key, so a mislabeled node is never silently placed anywhere.
func NetworkFromLabels(nodeLabels map[string]map[string]string, keys LabelKeys) (*Network, error) {
	n := &Network{locations: map[string]Location{}, labels: nodeLabels}
	var missing []string
	for node, labels := range nodeLabels {
		loc := Location{Host: node, Block: labels[keys.Block], Rack: labels[keys.Rack], ToR: labels[keys.ToR]}
		if loc.Rack == "" {
			missing = append(missing, node)
			continue
		}
		if loc.ToR == "" {
			loc.ToR = loc.Rack
		}
		n.locations[node] = loc
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return n, fmt.Errorf("nodes without label %s: %s", keys.Rack, strings.Join(missing, ", "))
	}
	return n, nil
}

// Location returns a node's location.
func (n *Network) Location(node string) (Location, bool) {
	l, ok := n.locations[node]
	return l, ok
}

// Matches reports whether a node carries every label of selector.
func (n *Network) Matches(node string, selector map[string]string) bool {
	for k, v := range selector {
		if n.labels[node][k] != v {
			return false
		}
	}
	return true
}

// DomainOf names the domain of a node at a level ("" for an unknown node or level).
func (n *Network) DomainOf(node, level string) string {
	l, ok := n.locations[node]
	if !ok {
		return ""
	}
	switch level {
	case LevelBlock:
		return l.Block
	case LevelRack:
		return l.Block + "/" + l.Rack
	case LevelHostname:
		return l.Host
	}
	return ""
}

// Domains groups the nodes by domain at a level, both sorted by name.
func (n *Network) Domains(level string) ([]Domain, error) {
	if err := ValidateLevel(level); err != nil {
		return nil, err
	}
	by := map[string][]string{}
	for node := range n.locations {
		d := n.DomainOf(node, level)
		by[d] = append(by[d], node)
	}
	out := make([]Domain, 0, len(by))
	for name, nodes := range by {
		sort.Strings(nodes)
		out = append(out, Domain{Name: name, Nodes: nodes})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out, nil
}

// Domain is a set of nodes at one level (a block, a rack, a host).
type Domain struct {
	Name  string
	Nodes []string
}

// ValidateLevel accepts block, rack and hostname.
func ValidateLevel(level string) error {
	for _, l := range Levels {
		if l == level {
			return nil
		}
	}
	return fmt.Errorf("topology level %q: accepted values are %s", level, strings.Join(Levels, ", "))
}

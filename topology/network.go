package topology

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// Network levels, outermost first. A block holds racks (its spine switches connect their
// ToRs), a rack holds one or more top-of-rack switches (ToR), a ToR connects hosts.
const (
	LevelBlock    = "block"
	LevelRack     = "rack"
	LevelToR      = "tor"
	LevelHostname = "hostname"
)

// Levels lists the accepted level names, outermost first.
var Levels = []string{LevelBlock, LevelRack, LevelToR, LevelHostname}

// SwitchLevels are the levels whose switches may have oversubscribed uplinks: a block's
// spine and a ToR.
var SwitchLevels = []string{LevelBlock, LevelToR}

// Node labels gpudra reads and writes for a node's place in the network.
const (
	LabelHostname = "kubernetes.io/hostname"
)

// Location is a node's place in the network.
type Location struct {
	Block, Rack, ToR, Host string
	// ToROversubscription and BlockOversubscription are the ratios of the downlink to the
	// uplink bandwidth of the node's ToR and of its block's spine (3 for 3:1); 0 when not
	// known, which counts as non-blocking.
	ToROversubscription, BlockOversubscription float64
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
	var missing, bad []string
	for node, labels := range nodeLabels {
		loc := Location{Host: node, Block: labels[keys.Block], Rack: labels[keys.Rack], ToR: labels[keys.ToR]}
		if loc.Rack == "" {
			missing = append(missing, node)
			continue
		}
		var err error
		if loc.ToROversubscription, err = oversubscriptionLabel(labels, api.LabelToROversubscription); err != nil {
			bad = append(bad, fmt.Sprintf("node %s: %v", node, err))
		}
		if loc.BlockOversubscription, err = oversubscriptionLabel(labels, api.LabelBlockOversubscription); err != nil {
			bad = append(bad, fmt.Sprintf("node %s: %v", node, err))
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
	if len(bad) > 0 {
		sort.Strings(bad)
		return n, fmt.Errorf("%s", strings.Join(bad, "; "))
	}
	return n, nil
}

// oversubscriptionLabel reads a ratio label (0 when absent).
func oversubscriptionLabel(labels map[string]string, key string) (float64, error) {
	v, ok := labels[key]
	if !ok {
		return 0, nil
	}
	r, err := ParseOversubscription(v)
	if err != nil {
		return 0, fmt.Errorf("label %s: %w", key, err)
	}
	return r, nil
}

// The range of oversubscription ratios accepted.
const (
	MinOversubscription = 0.01
	MaxOversubscription = 1000.0
)

// ParseOversubscription reads a switch's oversubscription, its downlink to its uplink
// bandwidth: "3:1", "1.5:1", "3" or "1" (non-blocking). Ratios below 1 (more uplink than
// downlink) are accepted as non-blocking.
func ParseOversubscription(v string) (float64, error) {
	num, den, ratio := strings.Cut(strings.TrimSpace(v), ":")
	r, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err == nil && ratio {
		var d float64
		d, err = strconv.ParseFloat(strings.TrimSpace(den), 64)
		if err == nil && d > 0 {
			r /= d
		} else if err == nil {
			err = fmt.Errorf("zero uplink")
		}
	}
	if err != nil || math.IsNaN(r) || r < MinOversubscription || r > MaxOversubscription {
		return 0, fmt.Errorf("oversubscription %q: accepted values are a ratio of downlink to uplink bandwidth from %g to %g, as \"3:1\" or a number (3; 1 is non-blocking)",
			v, MinOversubscription, MaxOversubscription)
	}
	return r, nil
}

// FormatOversubscription writes a ratio as "3:1".
func FormatOversubscription(r float64) string {
	return strconv.FormatFloat(r, 'f', -1, 64) + ":1"
}

// Oversubscription is the oversubscription of the switch a node reaches the rest of the
// network through at a level (tor: its ToR; block: its block's spine); 0 when not known.
func (n *Network) Oversubscription(node, level string) float64 {
	l := n.locations[node]
	switch level {
	case LevelToR:
		return l.ToROversubscription
	case LevelBlock:
		return l.BlockOversubscription
	}
	return 0
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

// Labels are a node's labels (nil for an unknown node); callers must not modify them.
func (n *Network) Labels(node string) map[string]string { return n.labels[node] }

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
	case LevelToR:
		return l.Block + "/" + l.Rack + "/" + l.ToR
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

// Domain is a set of nodes at one level (a block, a rack, a ToR, a host).
type Domain struct {
	Name  string
	Nodes []string
}

// ValidateLevel accepts block, rack, tor and hostname.
func ValidateLevel(level string) error {
	for _, l := range Levels {
		if l == level {
			return nil
		}
	}
	return fmt.Errorf("topology level %q: accepted values are %s", level, strings.Join(Levels, ", "))
}

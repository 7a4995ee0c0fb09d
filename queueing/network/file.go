package network

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gpudra/gpudra/internal/yamldoc"
	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// MaxFileBytes is the largest topology file ParseFile reads: a ConfigMap's own limit,
// room for some 30 000 nodes.
const MaxFileBytes = 1 << 20

// File is the network topology file: blocks of racks of nodes, each rack behind one
// top-of-rack switch (ToR) or several. A switch's oversubscription is the ratio of its
// downlink to its uplink bandwidth ("3:1", or a number; 1 or unset: non-blocking).
//
//	blocks:
//	- name: b1
//	  oversubscription: "2:1"   # optional: the block's spine
//	  racks:
//	  - name: r1
//	    tor: tor-b1-r1          # optional, defaults to the rack name
//	    oversubscription: "3:1" # optional: the ToR's
//	    nodes: [gpu-001, gpu-002]
//	  - name: r2                # a rack with two ToRs
//	    tors:
//	    - name: tor-b1-r2a
//	      oversubscription: "3:1"
//	      nodes: [gpu-003, gpu-004]
//	    - name: tor-b1-r2b
//	      nodes: [gpu-005, gpu-006]
type File struct {
	Blocks []Block `json:"blocks"`
}

// Block is a set of racks joined by its spine switches.
type Block struct {
	Name             string `json:"name"`
	Oversubscription Ratio  `json:"oversubscription,omitempty"`
	Racks            []Rack `json:"racks"`
}

// Rack is a set of nodes behind one top-of-rack switch (ToR, Oversubscription, Nodes) or
// several (ToRs).
type Rack struct {
	Name             string   `json:"name"`
	ToR              string   `json:"tor,omitempty"`
	Oversubscription Ratio    `json:"oversubscription,omitempty"`
	Nodes            []string `json:"nodes,omitempty"`
	ToRs             []ToR    `json:"tors,omitempty"`
}

// ToR is one of a rack's top-of-rack switches and the nodes behind it.
type ToR struct {
	Name             string   `json:"name"`
	Oversubscription Ratio    `json:"oversubscription,omitempty"`
	Nodes            []string `json:"nodes"`
}

// Ratio is a switch's oversubscription as written: "3:1", "3" or 3.
type Ratio string

// UnmarshalJSON takes a string or a number.
func (r *Ratio) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*r = Ratio(s)
		return nil
	}
	var f json.Number
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("oversubscription %s: a ratio such as \"3:1\" or a number", b)
	}
	*r = Ratio(f.String())
	return nil
}

// value is the ratio as a node label value ("3", "1.5"); "" when unset.
func (r Ratio) value() (string, error) {
	if r == "" {
		return "", nil
	}
	f, err := topology.ParseOversubscription(string(r))
	if err != nil {
		return "", err
	}
	return strconv.FormatFloat(f, 'f', -1, 64), nil
}

// tors lists a rack's ToRs: its own list, or the one the rack's fields describe.
func (r Rack) tors() []ToR {
	if len(r.ToRs) > 0 {
		return r.ToRs
	}
	name := r.ToR
	if name == "" {
		name = r.Name
	}
	return []ToR{{Name: name, Oversubscription: r.Oversubscription, Nodes: r.Nodes}}
}

// ParseFile reads a topology file (one YAML document of at most MaxFileBytes) strictly;
// errors name the field path and the accepted values.
func ParseFile(data []byte) (*File, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("topology file (%s): %d bytes, over the %d-byte (1 MiB) limit", FileKey, len(data), MaxFileBytes)
	}
	if err := yamldoc.One(data, "the topology file"); err != nil {
		return nil, fmt.Errorf("topology file (%s): %w", FileKey, err)
	}
	var f File
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("topology file (%s): %w", FileKey, err)
	}
	seen := map[string]string{}
	blocks := map[string]int{}
	var errs []string
	bad := func(path, format string, args ...any) {
		errs = append(errs, path+": "+fmt.Sprintf(format, args...))
	}
	labelValue := func(path, v string) {
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			bad(path, "%q is not a node label value: %s", v, strings.Join(msgs, "; "))
		}
	}
	// named checks the name at path+".name" of the entry at index k: given, a label value,
	// and not already in seen (dup formats the name and the earlier index).
	named := func(path, name string, k int, seen map[string]int, dup string) {
		if name == "" {
			bad(path+".name", "required")
		} else if prev, ok := seen[name]; ok {
			bad(path+".name", dup, name, prev)
		} else {
			seen[name] = k
			labelValue(path+".name", name)
		}
	}
	ratio := func(path string, r Ratio) {
		if _, err := r.value(); err != nil {
			bad(path, "%v", err)
		}
	}
	for i, b := range f.Blocks {
		path := fmt.Sprintf("blocks[%d]", i)
		named(path, b.Name, i, blocks, "block %s is already blocks[%d]; list each block once")
		ratio(path+".oversubscription", b.Oversubscription)
		racks := map[string]int{}
		for j, r := range b.Racks {
			path := fmt.Sprintf("blocks[%d].racks[%d]", i, j)
			named(path, r.Name, j, racks, "rack %s is already blocks["+strconv.Itoa(i)+"].racks[%d]; list each rack of a block once")
			if r.ToR != "" {
				labelValue(path+".tor", r.ToR)
			}
			ratio(path+".oversubscription", r.Oversubscription)
			if len(r.ToRs) > 0 && (r.ToR != "" || r.Oversubscription != "" || len(r.Nodes) > 0) {
				bad(path, "tors and tor, oversubscription or nodes: list the nodes under each of tors, or give the rack's one ToR with tor, oversubscription and nodes, not both")
			}
			nodes := func(path string, list []string) {
				for k, n := range list {
					path := fmt.Sprintf("%s.nodes[%d]", path, k)
					if msgs := validation.IsDNS1123Subdomain(n); len(msgs) > 0 {
						bad(path, "%q is not a node name: %s", n, strings.Join(msgs, "; "))
						continue
					}
					if prev, dup := seen[n]; dup {
						bad(path, "node %s is already in %s", n, prev)
					}
					seen[n] = path
				}
			}
			nodes(path, r.Nodes)
			tors := map[string]int{}
			for k, tor := range r.ToRs {
				path := fmt.Sprintf("%s.tors[%d]", path, k)
				named(path, tor.Name, k, tors, "ToR %s is already tors[%d]; list each ToR of a rack once")
				ratio(path+".oversubscription", tor.Oversubscription)
				nodes(path, tor.Nodes)
			}
		}
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return nil, fmt.Errorf("topology file (%s): %s", FileKey, strings.Join(errs, "; "))
	}
	return &f, nil
}

// Labels returns, per node, the labels the file gives it: its block, rack and ToR under
// the given keys, and the oversubscription of its ToR and its block's spine where the file
// gives them. ParseFile has checked the ratios.
func (f *File) Labels(blockKey, rackKey, torKey string) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, b := range f.Blocks {
		spine, _ := b.Oversubscription.value()
		for _, r := range b.Racks {
			for _, tor := range r.tors() {
				ratio, _ := tor.Oversubscription.value()
				for _, n := range tor.Nodes {
					out[n] = map[string]string{blockKey: b.Name, rackKey: r.Name, torKey: tor.Name}
					if ratio != "" {
						out[n][api.LabelToROversubscription] = ratio
					}
					if spine != "" {
						out[n][api.LabelBlockOversubscription] = spine
					}
				}
			}
		}
	}
	return out
}

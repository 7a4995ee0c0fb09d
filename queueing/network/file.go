package network

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gpudra/gpudra/internal/yamldoc"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// MaxFileBytes is the largest topology file ParseFile reads: a ConfigMap's own limit,
// room for some 30 000 nodes.
const MaxFileBytes = 1 << 20

// File is the network topology file: blocks of racks of nodes.
//
//	blocks:
//	- name: b1
//	  racks:
//	  - name: r1
//	    tor: tor-b1-r1      # optional, defaults to the rack name
//	    nodes: [gpu-001, gpu-002]
type File struct {
	Blocks []Block `json:"blocks"`
}

// Block is a set of racks.
type Block struct {
	Name  string `json:"name"`
	Racks []Rack `json:"racks"`
}

// Rack is a set of nodes behind one top-of-rack switch.
type Rack struct {
	Name  string   `json:"name"`
	ToR   string   `json:"tor,omitempty"`
	Nodes []string `json:"nodes"`
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
	for i, b := range f.Blocks {
		path := fmt.Sprintf("blocks[%d]", i)
		if b.Name == "" {
			bad(path+".name", "required")
		} else if prev, dup := blocks[b.Name]; dup {
			bad(path+".name", "block %s is already blocks[%d]; list each block once", b.Name, prev)
		} else {
			blocks[b.Name] = i
			labelValue(path+".name", b.Name)
		}
		racks := map[string]int{}
		for j, r := range b.Racks {
			path := fmt.Sprintf("blocks[%d].racks[%d]", i, j)
			if r.Name == "" {
				bad(path+".name", "required")
			} else if prev, dup := racks[r.Name]; dup {
				bad(path+".name", "rack %s is already blocks[%d].racks[%d]; list each rack of a block once", r.Name, i, prev)
			} else {
				racks[r.Name] = j
				labelValue(path+".name", r.Name)
			}
			if r.ToR != "" {
				labelValue(path+".tor", r.ToR)
			}
			for k, n := range r.Nodes {
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
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return nil, fmt.Errorf("topology file (%s): %s", FileKey, strings.Join(errs, "; "))
	}
	return &f, nil
}

// Labels returns, per node, the labels the file gives it.
func (f *File) Labels(blockKey, rackKey, torKey string) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, b := range f.Blocks {
		for _, r := range b.Racks {
			tor := r.ToR
			if tor == "" {
				tor = r.Name
			}
			for _, n := range r.Nodes {
				out[n] = map[string]string{blockKey: b.Name, rackKey: r.Name, torKey: tor}
			}
		}
	}
	return out
}

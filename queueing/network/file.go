package network

import (
	"fmt"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

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

// ParseFile reads a topology file strictly; errors name the field path.
func ParseFile(data []byte) (*File, error) {
	var f File
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("topology file: %w", err)
	}
	seen := map[string]string{}
	var errs []string
	for i, b := range f.Blocks {
		if b.Name == "" {
			errs = append(errs, fmt.Sprintf("blocks[%d].name: required", i))
		}
		for j, r := range b.Racks {
			if r.Name == "" {
				errs = append(errs, fmt.Sprintf("blocks[%d].racks[%d].name: required", i, j))
			}
			for k, n := range r.Nodes {
				path := fmt.Sprintf("blocks[%d].racks[%d].nodes[%d]", i, j, k)
				if prev, dup := seen[n]; dup {
					errs = append(errs, fmt.Sprintf("%s: node %s is already in %s", path, n, prev))
				}
				seen[n] = path
			}
		}
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return nil, fmt.Errorf("topology file: %s", strings.Join(errs, "; "))
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

package topology

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxGPUs is the most GPUs gpudra accepts on one node. The largest boards have 16
// (DGX-2 and HGX-2 on NVSwitch; PCIe chassis hold up to 20); 32 leaves room without
// accepting sizes no node has.
const MaxGPUs = 32

// NVLinkGraph is the NVLink wiring of one node's GPUs, indexed by GPU index.
type NVLinkGraph struct {
	// Links[i][j] is the number of direct NVLinks between GPU i and GPU j (0 = none).
	Links [][]int
	// SwitchLinks[i] is the number of GPU i's NVLinks that end on an NVSwitch.
	// GPUs with switch links are all connected to each other through the fabric.
	SwitchLinks []int
}

// NewNVLinkGraph returns an empty graph for n GPUs.
func NewNVLinkGraph(n int) NVLinkGraph {
	g := NVLinkGraph{Links: make([][]int, n), SwitchLinks: make([]int, n)}
	for i := range g.Links {
		g.Links[i] = make([]int, n)
	}
	return g
}

// Len is the number of GPUs.
func (g NVLinkGraph) Len() int { return len(g.Links) }

// Fabric names the kind of NVLink wiring: "nvswitch" when every GPU reaches the others
// through NVSwitches, "direct" when GPUs are wired to each other (e.g. the DGX-1
// hybrid cube-mesh), "none" for PCIe-only nodes.
func (g NVLinkGraph) Fabric() string {
	switched := 0
	direct := false
	for i := range g.Links {
		if g.SwitchLinks[i] > 0 {
			switched++
		}
		for j := range g.Links[i] {
			if g.Links[i][j] > 0 {
				direct = true
			}
		}
	}
	switch {
	case switched > 0 && switched == g.Len():
		return "nvswitch"
	case direct:
		return "direct"
	default:
		return "none"
	}
}

// PairLinks is the NVLink count between GPUs i and j: direct links, or on an NVSwitch
// fabric the smaller of the two GPUs' switch links (the bandwidth they can use together).
func (g NVLinkGraph) PairLinks(i, j int) int {
	if i == j {
		return 0
	}
	if g.Links[i][j] > 0 {
		return g.Links[i][j]
	}
	if g.SwitchLinks[i] > 0 && g.SwitchLinks[j] > 0 {
		return min(g.SwitchLinks[i], g.SwitchLinks[j])
	}
	return 0
}

// Connected reports whether GPUs i and j can talk over NVLink directly or through NVSwitch.
func (g NVLinkGraph) Connected(i, j int) bool { return g.PairLinks(i, j) > 0 }

// Group is a set of GPUs that a node publishes as one selectable NVLink group device.
type Group struct {
	// Members are GPU indices, ascending.
	Members []int
	// MinLinks is the fewest NVLinks between any two members.
	MinLinks int
	// Fabric is "nvswitch" or "direct".
	Fabric string
}

// Name is the group's device-name suffix, e.g. "0-1-2-3".
func (gr Group) Name() string { return JoinIndices(gr.Members, "-") }

// Groups returns the NVLink groups a node publishes:
//   - on an NVSwitch fabric, aligned power-of-two blocks (pairs 0-1, 2-3, …, quads 0-3, 4-7,
//     the whole board): buddy-style so that small groups keep large blocks free;
//   - on directly wired GPUs, every linked pair and every maximal clique of three or more
//     GPUs (a V100 quad), each fully connected by construction.
//
// Any k GPUs of one NVSwitch domain can still be requested as k whole GPUs with a
// matchAttribute on nvlinkClique; groups are the packing-friendly shape.
func (g NVLinkGraph) Groups() []Group {
	var out []Group
	switch g.Fabric() {
	case "nvswitch":
		for size := 2; size <= g.Len(); size *= 2 {
			for start := 0; start+size <= g.Len(); start += size {
				members := make([]int, size)
				for k := range members {
					members[k] = start + k
				}
				out = append(out, Group{Members: members, MinLinks: g.minLinks(members), Fabric: "nvswitch"})
			}
		}
	case "direct":
		for i := 0; i < g.Len(); i++ {
			for j := i + 1; j < g.Len(); j++ {
				if g.Links[i][j] > 0 {
					out = append(out, Group{Members: []int{i, j}, MinLinks: g.Links[i][j], Fabric: "direct"})
				}
			}
		}
		for _, c := range g.MaximalCliques() {
			if len(c) >= 3 {
				out = append(out, Group{Members: c, MinLinks: g.minLinks(c), Fabric: "direct"})
			}
		}
	}
	return out
}

func (g NVLinkGraph) minLinks(members []int) int {
	m := -1
	for a := range members {
		for b := a + 1; b < len(members); b++ {
			l := g.PairLinks(members[a], members[b])
			if m < 0 || l < m {
				m = l
			}
		}
	}
	return max(m, 0)
}

// MaximalCliques lists the maximal sets of pairwise NVLink-connected GPUs (size ≥ 2),
// each ascending, in lexicographic order. It is Bron–Kerbosch with Tomita's pivot: each
// step branches only on the candidates the pivot (the GPU connected to most candidates)
// does not reach, so an NVSwitch board (all GPUs connected) takes one branch per level,
// O(n³) in all, and no graph of n GPUs takes more than O(3^(n/3)) branches.
func (g NVLinkGraph) MaximalCliques() [][]int {
	var out [][]int
	var walk func(r, p, x []int)
	walk = func(r, p, x []int) {
		if len(p) == 0 {
			if len(x) == 0 && len(r) >= 2 {
				c := slices.Clone(r)
				slices.Sort(c)
				out = append(out, c)
			}
			return
		}
		pivot, reach := -1, -1
		for _, u := range slices.Concat(p, x) {
			if k := len(g.neighboursIn(u, p)); k > reach {
				pivot, reach = u, k
			}
		}
		for _, v := range slices.Clone(p) {
			if v == pivot || !g.Connected(v, pivot) {
				walk(append(slices.Clone(r), v), g.neighboursIn(v, p), g.neighboursIn(v, x))
				p = slices.DeleteFunc(p, func(u int) bool { return u == v })
				x = append(x, v)
			}
		}
	}
	all := make([]int, g.Len())
	for i := range all {
		all[i] = i
	}
	walk(nil, all, nil)
	slices.SortFunc(out, slices.Compare)
	return out
}

func (g NVLinkGraph) neighboursIn(v int, set []int) []int {
	var out []int
	for _, u := range set {
		if u != v && g.Connected(u, v) {
			out = append(out, u)
		}
	}
	return out
}

// Clique returns, for each GPU, the largest maximal clique that contains it when that
// clique is unique (nil otherwise). GPUs with the same clique are pairwise NVLinked, so
// the clique's name is a value matchAttribute can compare.
func (g NVLinkGraph) Clique() [][]int {
	out := make([][]int, g.Len())
	ambiguous := make([]bool, g.Len())
	for _, c := range g.MaximalCliques() {
		for _, v := range c {
			switch {
			case out[v] == nil || len(c) > len(out[v]):
				out[v], ambiguous[v] = c, false
			case len(c) == len(out[v]):
				ambiguous[v] = true
			}
		}
	}
	for v := range out {
		if ambiguous[v] {
			out[v] = nil
		}
	}
	return out
}

// Domains returns, for each GPU, the members of its NVLink-connected component
// (nil for a GPU without NVLink).
func (g NVLinkGraph) Domains() [][]int {
	out := make([][]int, g.Len())
	seen := make([]bool, g.Len())
	for s := 0; s < g.Len(); s++ {
		if seen[s] {
			continue
		}
		comp := []int{s}
		seen[s] = true
		for k := 0; k < len(comp); k++ {
			for u := 0; u < g.Len(); u++ {
				if !seen[u] && g.Connected(comp[k], u) {
					seen[u] = true
					comp = append(comp, u)
				}
			}
		}
		if len(comp) < 2 {
			continue
		}
		slices.Sort(comp)
		for _, v := range comp {
			out[v] = comp
		}
	}
	return out
}

// Validate checks the graph is square and symmetric.
func (g NVLinkGraph) Validate() error {
	if len(g.SwitchLinks) != g.Len() {
		return fmt.Errorf("nvlink: %d GPUs but %d switch link counts", g.Len(), len(g.SwitchLinks))
	}
	for i := range g.Links {
		if len(g.Links[i]) != g.Len() {
			return fmt.Errorf("nvlink: row %d has %d entries, want %d", i, len(g.Links[i]), g.Len())
		}
		for j := range g.Links[i] {
			if g.Links[i][j] != g.Links[j][i] {
				return fmt.Errorf("nvlink: links[%d][%d]=%d but links[%d][%d]=%d (must be symmetric)", i, j, g.Links[i][j], j, i, g.Links[j][i])
			}
		}
	}
	return nil
}

// JoinIndices formats GPU indices with sep, e.g. "0-1-2-3".
func JoinIndices(idx []int, sep string) string {
	s := make([]string, len(idx))
	for k, v := range idx {
		s[k] = strconv.Itoa(v)
	}
	return strings.Join(s, sep)
}

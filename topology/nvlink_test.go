package topology

import (
	"math/bits"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"
)

// dgx1V100 is the DGX-1 V100 hybrid cube-mesh (NVLink count per pair).
var dgx1V100 = [][]int{
	{0, 1, 1, 2, 2, 0, 0, 0},
	{1, 0, 2, 1, 0, 2, 0, 0},
	{1, 2, 0, 2, 0, 0, 1, 0},
	{2, 1, 2, 0, 0, 0, 0, 1},
	{2, 0, 0, 0, 0, 1, 1, 2},
	{0, 2, 0, 0, 1, 0, 2, 1},
	{0, 0, 1, 0, 1, 2, 0, 2},
	{0, 0, 0, 1, 2, 1, 2, 0},
}

func graphOf(links [][]int, switchLinks int) NVLinkGraph {
	g := NewNVLinkGraph(len(links))
	for i := range links {
		copy(g.Links[i], links[i])
		g.SwitchLinks[i] = switchLinks
	}
	return g
}

func nvswitch(n, links int) NVLinkGraph {
	g := NewNVLinkGraph(n)
	for i := range g.SwitchLinks {
		g.SwitchLinks[i] = links
	}
	return g
}

func TestGroups(t *testing.T) {
	tests := []struct {
		name       string
		graph      NVLinkGraph
		wantFabric string
		wantGroups []string
	}{
		{
			name:       "cube-mesh publishes every linked pair and both quads",
			graph:      graphOf(dgx1V100, 0),
			wantFabric: "direct",
			wantGroups: []string{"0-1", "0-2", "0-3", "0-4", "1-2", "1-3", "1-5", "2-3", "2-6", "3-7", "4-5", "4-6", "4-7", "5-6", "5-7", "6-7", "0-1-2-3", "4-5-6-7"},
		},
		{
			name:       "nvswitch publishes aligned pairs, quads and the whole board",
			graph:      nvswitch(8, 18),
			wantFabric: "nvswitch",
			wantGroups: []string{"0-1", "2-3", "4-5", "6-7", "0-1-2-3", "4-5-6-7", "0-1-2-3-4-5-6-7"},
		},
		{
			name:       "pcie-only publishes nothing",
			graph:      NewNVLinkGraph(8),
			wantFabric: "none",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.graph.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := tc.graph.Fabric(); got != tc.wantFabric {
				t.Errorf("Fabric() = %q, want %q", got, tc.wantFabric)
			}
			var got []string
			for _, g := range tc.graph.Groups() {
				got = append(got, g.Name())
			}
			if !reflect.DeepEqual(got, tc.wantGroups) {
				t.Errorf("Groups() = %v\nwant      %v", got, tc.wantGroups)
			}
		})
	}
}

func TestCubeMeshLinkCounts(t *testing.T) {
	g := graphOf(dgx1V100, 0)
	doubles := 0
	for _, gr := range g.Groups() {
		if len(gr.Members) == 2 && gr.MinLinks == 2 {
			doubles++
			if g.Links[gr.Members[0]][gr.Members[1]] != 2 {
				t.Errorf("group %s claims 2 links, matrix says %d", gr.Name(), g.Links[gr.Members[0]][gr.Members[1]])
			}
		}
		if len(gr.Members) == 4 && gr.MinLinks != 1 {
			t.Errorf("quad %s: MinLinks = %d, want 1 (0-1 has a single link)", gr.Name(), gr.MinLinks)
		}
	}
	if doubles != 8 {
		t.Errorf("double-link pairs = %d, want 8", doubles)
	}
	for i, row := range dgx1V100 {
		sum := 0
		for _, l := range row {
			sum += l
		}
		if sum != 6 {
			t.Errorf("GPU %d has %d links, a V100 has 6", i, sum)
		}
	}
}

func TestCliquesAndDomains(t *testing.T) {
	tests := []struct {
		name        string
		graph       NVLinkGraph
		wantCliques [][]int
		wantDomain  []int
	}{
		{
			name:        "each V100 belongs to exactly one quad",
			graph:       graphOf(dgx1V100, 0),
			wantCliques: [][]int{{0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}, {4, 5, 6, 7}, {4, 5, 6, 7}, {4, 5, 6, 7}, {4, 5, 6, 7}},
			wantDomain:  []int{0, 1, 2, 3, 4, 5, 6, 7},
		},
		{
			name:        "nvswitch board is one clique",
			graph:       nvswitch(4, 12),
			wantCliques: [][]int{{0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}},
			wantDomain:  []int{0, 1, 2, 3},
		},
		{
			name:        "pcie-only GPUs have no clique",
			graph:       NewNVLinkGraph(2),
			wantCliques: [][]int{nil, nil},
		},
		{
			name: "a GPU in two equal cliques gets none",
			graph: graphOf([][]int{
				{0, 1, 1},
				{1, 0, 0},
				{1, 0, 0},
			}, 0),
			wantCliques: [][]int{nil, {0, 1}, {0, 2}},
			wantDomain:  []int{0, 1, 2},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.graph.Clique(); !reflect.DeepEqual(got, tc.wantCliques) {
				t.Errorf("Clique() = %v, want %v", got, tc.wantCliques)
			}
			if got := tc.graph.Domains()[0]; !reflect.DeepEqual(got, tc.wantDomain) {
				t.Errorf("Domains()[0] = %v, want %v", got, tc.wantDomain)
			}
		})
	}
}

func TestValidateRejectsAsymmetry(t *testing.T) {
	g := NewNVLinkGraph(2)
	g.Links[0][1] = 2
	if err := g.Validate(); err == nil {
		t.Fatal("asymmetric matrix accepted")
	}
}

func TestLargeNVSwitchBoards(t *testing.T) {
	for _, n := range []int{24, 32} {
		t.Run(strconv.Itoa(n)+" GPUs", func(t *testing.T) {
			g := nvswitch(n, 18)
			all := make([]int, n)
			for i := range all {
				all[i] = i
			}
			if got := g.MaximalCliques(); !reflect.DeepEqual(got, [][]int{all}) {
				t.Errorf("MaximalCliques() = %v, want the whole board", got)
			}
			for i, c := range g.Clique() {
				if !reflect.DeepEqual(c, all) {
					t.Fatalf("Clique()[%d] = %v, want the whole board", i, c)
				}
			}
			sizes := map[int]int{}
			for _, gr := range g.Groups() {
				if gr.Members[0]%len(gr.Members) != 0 || gr.MinLinks != 18 {
					t.Errorf("group %s: not an aligned block with 18 links (MinLinks %d)", gr.Name(), gr.MinLinks)
				}
				sizes[len(gr.Members)]++
			}
			want := map[int]int{2: n / 2, 4: n / 4, 8: n / 8, 16: n / 16}
			if n == 32 {
				want[32] = 1
			}
			if !reflect.DeepEqual(sizes, want) {
				t.Errorf("groups by size = %v, want %v", sizes, want)
			}
		})
	}
}

// bruteForceCliques lists the maximal cliques of g by trying every subset.
func bruteForceCliques(g NVLinkGraph) [][]int {
	n := g.Len()
	clique := func(set uint) bool {
		for i := range n {
			for j := i + 1; j < n; j++ {
				if set&(1<<i) != 0 && set&(1<<j) != 0 && !g.Connected(i, j) {
					return false
				}
			}
		}
		return true
	}
	var out [][]int
	for set := uint(1); set < 1<<n; set++ {
		if bits.OnesCount(set) < 2 || !clique(set) {
			continue
		}
		maximal := true
		for v := range n {
			if set&(1<<v) == 0 && clique(set|1<<v) {
				maximal = false
				break
			}
		}
		if !maximal {
			continue
		}
		var c []int
		for v := range n {
			if set&(1<<v) != 0 {
				c = append(c, v)
			}
		}
		out = append(out, c)
	}
	slices.SortFunc(out, slices.Compare)
	return out
}

func TestMaximalCliquesMatchEverySubset(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for k := range 200 {
		n := 2 + r.IntN(9)
		g := NewNVLinkGraph(n)
		density := r.Float64()
		for i := range n {
			for j := i + 1; j < n; j++ {
				if r.Float64() < density {
					g.Links[i][j], g.Links[j][i] = 1, 1
				}
			}
			if r.IntN(8) == 0 {
				g.SwitchLinks[i] = 6
			}
		}
		got, want := g.MaximalCliques(), bruteForceCliques(g)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("graph %d (%v, switch links %v): MaximalCliques() = %v, want %v", k, g.Links, g.SwitchLinks, got, want)
		}
	}
}

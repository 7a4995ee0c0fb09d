package topology

import (
	"reflect"
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

package gang_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/driver/simulated"
	"github.com/gpudra/gpudra/locality"
	"github.com/gpudra/gpudra/queueing/gang"
	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

var imagenet = locality.Dataset{Namespace: "team", Name: "imagenet"}

// cachingCluster is cluster's one block of two racks of four 4-GPU nodes, the named nodes
// carrying imagenet's cache label.
func cachingCluster(t *testing.T, caching ...string) (*allocation.State, *topology.Network) {
	t.Helper()
	var rs []*resourceapi.ResourceSlice
	labels := map[string]map[string]string{}
	for r := range 2 {
		for n := range 4 {
			name := fmt.Sprintf("r%d-n%d", r+1, n+1)
			_, s, err := simulated.Slices("hgx-h100-4gpu", name, driver.RenderOptions{})
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, s...)
			labels[name] = map[string]string{api.LabelBlock: "b1", api.LabelRack: fmt.Sprintf("r%d", r+1)}
			if slices.Contains(caching, name) {
				labels[name][locality.LabelKey(imagenet)] = "cached"
			}
		}
	}
	classes, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	net, err := topology.NetworkFromLabels(labels, topology.DefaultLabelKeys)
	if err != nil {
		t.Fatal(err)
	}
	return allocation.New(classes, rs), net
}

func readers(t *testing.T, name string, count int, required string, data bool) gang.PodSet {
	s := gang.PodSet{Name: name, Count: count, Claims: []resourceapi.ResourceClaimSpec{spec(t, tensorParallel4)}, Required: required}
	if data {
		s.Data = []locality.Need{{Dataset: imagenet, Keys: []string{locality.LabelKey(imagenet)}}}
	}
	return s
}

func TestDataLocality(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name    string
		caching []string
		// busy is a gang planned first, holding its nodes.
		busy      *gang.PodSet
		set       gang.PodSet
		wantNodes []string
		wantNote  string
	}{
		{name: "a gang goes to the rack caching its dataset, on the caching nodes",
			caching: []string{"r2-n3", "r2-n4"}, set: readers(t, "w", 2, topology.LevelRack, true),
			wantNodes: []string{"r2-n3", "r2-n4"}, wantNote: "dataset team/imagenet cached on 2 of 4 nodes of b1/r2; 2 of 2 pods planned there"},
		{name: "without datasets, the first rack that fits, as before",
			caching: []string{"r2-n3", "r2-n4"}, set: readers(t, "w", 2, topology.LevelRack, false),
			wantNodes: []string{"r1-n1", "r1-n2"}},
		{name: "the rack caching more wins",
			caching: []string{"r1-n1", "r2-n1", "r2-n2"}, set: readers(t, "w", 2, topology.LevelRack, true),
			wantNodes: []string{"r2-n1", "r2-n2"}},
		{name: "a preference, not a requirement: a full caching rack leaves the gang elsewhere",
			caching: []string{"r2-n1", "r2-n2"}, busy: ptr(readers(t, "busy", 3, topology.LevelRack, true)), set: readers(t, "w", 4, topology.LevelRack, true),
			wantNodes: []string{"r1-n1", "r1-n2", "r1-n3", "r1-n4"}, wantNote: "dataset team/imagenet cached on 0 of 4 nodes of b1/r1; 0 of 4 pods planned there"},
		{name: "without a required level, caching nodes first",
			caching: []string{"r2-n4"}, set: readers(t, "w", 2, "", true),
			wantNodes: []string{"r2-n4", "r1-n1"}, wantNote: "dataset team/imagenet cached on 1 of 8 nodes of the cluster; 1 of 2 pods planned there"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, net := cachingCluster(t, c.caching...)
			if c.busy != nil {
				var err error
				if _, st, err = gang.Plan(ctx, st, net, nil, []gang.PodSet{*c.busy}); err != nil {
					t.Fatal(err)
				}
			}
			p, _, err := gang.Plan(ctx, st, net, nil, []gang.PodSet{c.set})
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Nodes["w"]; !slices.Equal(got, c.wantNodes) {
				t.Errorf("nodes %v, want %v", got, c.wantNodes)
			}
			notes := strings.Join(p.Notes["w"], "\n")
			if c.wantNote != "" && !strings.Contains(notes, c.wantNote) {
				t.Errorf("notes %q, want %q", notes, c.wantNote)
			}
			if len(c.set.Data) == 0 && strings.Contains(notes, "dataset") {
				t.Errorf("notes of a set without datasets speak of them: %q", notes)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

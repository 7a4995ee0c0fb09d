package gang_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/driver/simulated"
	"github.com/gpudra/gpudra/queueing/gang"
	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// tor is one top-of-rack switch of block b1 and its hosts of 4 NVLinked A100s.
type tor struct {
	rack, name, oversubscription string
	hosts                        int
}

// torCluster builds block b1 from ToRs; hosts are named <tor>-n<k>.
func torCluster(t *testing.T, tors ...tor) (*allocation.State, *topology.Network) {
	t.Helper()
	var slices []*resourceapi.ResourceSlice
	labels := map[string]map[string]string{}
	for _, s := range tors {
		for k := range s.hosts {
			name := fmt.Sprintf("%s-n%d", s.name, k+1)
			_, rs, err := simulated.Slices("hgx-a100-4gpu", name, driver.RenderOptions{})
			if err != nil {
				t.Fatal(err)
			}
			slices = append(slices, rs...)
			labels[name] = map[string]string{api.LabelBlock: "b1", api.LabelRack: s.rack, api.LabelToR: s.name}
			if s.oversubscription != "" {
				labels[name][api.LabelToROversubscription] = s.oversubscription
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
	return allocation.New(classes, slices), net
}

// threeD is 2-way data × 4-way pipeline × 4-way tensor parallelism as 32 one-GPU pods:
// tensor-parallel groups of 4 consecutive pods per host inside pipelines of 16 per ToR.
func threeD(t *testing.T) gang.PodSet {
	return gang.PodSet{Name: "workers", Count: 32, Claims: []resourceapi.ResourceClaimSpec{spec(t, oneGPU)},
		Required: topology.LevelBlock, SliceSize: 16, SliceNetwork: topology.LevelToR,
		SubsliceSize: 4, SubsliceRequired: topology.LevelHostname}
}

// domainsOf lists, per group of size consecutive pods, the domains at level they are in.
func domainsOf(net *topology.Network, nodes []string, size int, level string) [][]string {
	var out [][]string
	for g := 0; g < len(nodes)/size; g++ {
		seen := map[string]bool{}
		var ds []string
		for _, n := range nodes[g*size : (g+1)*size] {
			if d := net.DomainOf(n, level); !seen[d] {
				seen[d] = true
				ds = append(ds, d)
			}
		}
		out = append(out, ds)
	}
	return out
}

func TestTwoLevelSlices(t *testing.T) {
	ctx := context.Background()
	t.Run("tensor-parallel groups per host inside pipelines per ToR", func(t *testing.T) {
		st, net := torCluster(t, tor{"r1", "tor-a", "3:1", 4}, tor{"r2", "tor-b", "3:1", 4})
		p, _, err := gang.Plan(ctx, st, net, nil, []gang.PodSet{threeD(t)})
		if err != nil {
			t.Fatal(err)
		}
		nodes := p.Nodes["workers"]
		for g, hosts := range domainsOf(net, nodes, 4, topology.LevelHostname) {
			if len(hosts) != 1 {
				t.Errorf("tensor-parallel group %d (pods %d-%d) spans hosts %v", g, 4*g, 4*g+3, hosts)
			}
		}
		tors := domainsOf(net, nodes, 16, topology.LevelToR)
		if len(tors) != 2 || len(tors[0]) != 1 || len(tors[1]) != 1 || tors[0][0] == tors[1][0] {
			t.Errorf("pipelines' ToRs = %v, want each pipeline under its own ToR", tors)
		}
		want := "slices of 16 kept under one ToR (required: b1/r1/tor-a uplinks oversubscribed 3:1, b1/r2/tor-b uplinks oversubscribed 3:1)"
		if notes := strings.Join(p.Notes["workers"], "; "); notes != want {
			t.Errorf("notes = %q, want %q", notes, want)
		}
	})
	t.Run("subslices without slices: groups of 4 per host anywhere", func(t *testing.T) {
		st, net := torCluster(t, tor{"r1", "tor-a", "", 3})
		// A busy GPU on the first host leaves it 3: no group of 4 goes there.
		if _, err := st.AllocateAndCommit(ctx, "tor-a-n1", claimOf(t, oneGPU)); err != nil {
			t.Fatal(err)
		}
		set := gang.PodSet{Name: "tp", Count: 8, Claims: []resourceapi.ResourceClaimSpec{spec(t, oneGPU)},
			SubsliceSize: 4, SubsliceRequired: topology.LevelHostname}
		p, _, err := gang.Plan(ctx, st, net, nil, []gang.PodSet{set})
		if err != nil {
			t.Fatal(err)
		}
		got := domainsOf(net, p.Nodes["tp"], 4, topology.LevelHostname)
		if fmt.Sprint(got) != "[[tor-a-n2] [tor-a-n3]]" {
			t.Errorf("groups on %v, want [[tor-a-n2] [tor-a-n3]]", got)
		}
		set.Count = 12
		_, _, err = gang.Plan(ctx, st, net, nil, []gang.PodSet{set})
		if !gang.IsUnplaceable(err) || !strings.Contains(err.Error(), "subslices of 4 per hostname") {
			t.Errorf("a third group with 3 GPUs left on one host: err = %v, want unplaceable naming the subslices", err)
		}
	})
	for _, tc := range []struct {
		name string
		set  func(*gang.PodSet)
		want string
	}{
		{"a subslice that does not divide its slice", func(s *gang.PodSet) { s.SubsliceSize = 3 },
			"annotation gpudra.dev/subslice-size 3: must divide gpudra.dev/slice-size 16 (16)"},
		{"a slice that does not divide the pod set", func(s *gang.PodSet) { s.SliceSize = 12 },
			"annotation gpudra.dev/slice-size 12: must divide the pod set's count (32)"},
		{"a subslice level without a size", func(s *gang.PodSet) { s.SubsliceSize = 0 },
			"annotation gpudra.dev/subslice-required-topology needs gpudra.dev/subslice-size, an integer of at least 1"},
		{"a negative subslice size", func(s *gang.PodSet) { s.SubsliceSize = -4 },
			"annotation gpudra.dev/subslice-size -4: must be at least 1"},
		{"a subslice size without a level", func(s *gang.PodSet) { s.SubsliceRequired = "" },
			"annotation gpudra.dev/subslice-size needs gpudra.dev/subslice-required-topology (block, rack, tor, hostname) or gpudra.dev/subslice-topology (block, tor)"},
		{"both a required and a network level", func(s *gang.PodSet) { s.SliceRequired = topology.LevelRack },
			"annotations gpudra.dev/slice-required-topology and gpudra.dev/slice-topology: set one of them, not both"},
		{"a network level without a switch", func(s *gang.PodSet) { s.SliceNetwork = topology.LevelHostname },
			`annotation gpudra.dev/slice-topology "hostname": accepted values are block, tor`},
		{"an unknown subslice level", func(s *gang.PodSet) { s.SubsliceRequired = "gpu" },
			`annotation gpudra.dev/subslice-required-topology: topology level "gpu": accepted values are block, rack, tor, hostname`},
		{"a subslice wider than its slice", func(s *gang.PodSet) { s.SubsliceRequired = topology.LevelRack },
			"annotation gpudra.dev/subslice-required-topology: rack is wider than the tor that holds it"},
	} {
		t.Run(tc.name+" is bad input", func(t *testing.T) {
			st, net := torCluster(t, tor{"r1", "tor-a", "", 8})
			set := threeD(t)
			tc.set(&set)
			_, _, err := gang.Plan(ctx, st, net, nil, []gang.PodSet{set})
			if err == nil || gang.IsUnplaceable(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want bad input saying %q", err, tc.want)
			}
		})
	}
}

func TestToRRule(t *testing.T) {
	ctx := context.Background()
	// Rack r1 has one ToR of 4 hosts; rack r2 two ToRs of 2 hosts each.
	layout := func(r2 string) []tor {
		return []tor{{"r1", "tor-a", "3:1", 4}, {"r2", "tor-b1", r2, 2}, {"r2", "tor-b2", r2, 2}}
	}
	t.Run("a pipeline may span non-blocking ToRs, and the note says one ToR was only preferred", func(t *testing.T) {
		for _, ratio := range []string{"", "1", "1:1"} {
			st, net := torCluster(t, layout(ratio)...)
			p, _, err := gang.Plan(ctx, st, net, nil, []gang.PodSet{threeD(t)})
			if err != nil {
				t.Fatalf("r2 at %q: %v", ratio, err)
			}
			tors := domainsOf(net, p.Nodes["workers"], 16, topology.LevelToR)
			if fmt.Sprint(tors) != "[[b1/r1/tor-a] [b1/r2/tor-b1 b1/r2/tor-b2]]" {
				t.Errorf("r2 at %q: pipelines under %v", ratio, tors)
			}
			want := "slices of 16 kept under one ToR (required: b1/r1/tor-a uplinks oversubscribed 3:1); " +
				"slice 1 spans b1/r2/tor-b1, b1/r2/tor-b2: one ToR only preferred, their ToRs are non-blocking"
			if notes := strings.Join(p.Notes["workers"], "; "); notes != want {
				t.Errorf("r2 at %q: notes = %q, want %q", ratio, notes, want)
			}
		}
	})
	t.Run("a pipeline may not span oversubscribed ToRs: retry, naming them", func(t *testing.T) {
		st, net := torCluster(t, layout("3:1")...)
		_, _, err := gang.Plan(ctx, st, net, nil, []gang.PodSet{threeD(t)})
		want := "slices must each stay under one ToR where its uplinks are oversubscribed: b1/r1/tor-a 3:1, b1/r2/tor-b1 3:1, b1/r2/tor-b2 3:1"
		if !gang.IsUnplaceable(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want unplaceable saying %q", err, want)
		}
	})
	t.Run("a required ToR level never spans, whatever the ratio", func(t *testing.T) {
		st, net := torCluster(t, layout("1:1")...)
		set := threeD(t)
		set.SliceNetwork, set.SliceRequired = "", topology.LevelToR
		if _, _, err := gang.Plan(ctx, st, net, nil, []gang.PodSet{set}); !gang.IsUnplaceable(err) {
			t.Errorf("err = %v, want unplaceable", err)
		}
	})
	t.Run("units under one ToR are preferred where they fit, even when non-blocking", func(t *testing.T) {
		st, net := torCluster(t, tor{"r1", "tor-a", "", 2}, tor{"r1", "tor-b", "1.5:1", 2})
		set := threeD(t)
		set.Count, set.SliceSize = 16, 8
		p, _, err := gang.Plan(ctx, st, net, nil, []gang.PodSet{set})
		if err != nil {
			t.Fatal(err)
		}
		tors := domainsOf(net, p.Nodes["workers"], 8, topology.LevelToR)
		if fmt.Sprint(tors) != "[[b1/r1/tor-a] [b1/r1/tor-b]]" {
			t.Errorf("pipelines under %v", tors)
		}
		want := "slices of 8 kept under one ToR (required: b1/r1/tor-b uplinks oversubscribed 1.5:1; preferred: b1/r1/tor-a non-blocking)"
		if notes := strings.Join(p.Notes["workers"], "; "); notes != want {
			t.Errorf("notes = %q, want %q", notes, want)
		}
	})
}

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

// cluster is one block of racks, each with nodes of 4 fully NVLinked H100s.
func cluster(t *testing.T, racks, nodesPerRack int) (*allocation.State, *topology.Network) {
	t.Helper()
	var slices []*resourceapi.ResourceSlice
	labels := map[string]map[string]string{}
	for r := range racks {
		for n := range nodesPerRack {
			name := fmt.Sprintf("r%d-n%d", r+1, n+1)
			_, rs, err := simulated.Slices("hgx-h100-4gpu", name, driver.RenderOptions{})
			if err != nil {
				t.Fatal(err)
			}
			slices = append(slices, rs...)
			labels[name] = map[string]string{api.LabelBlock: "b1", api.LabelRack: fmt.Sprintf("r%d", r+1)}
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

func spec(t *testing.T, y string) resourceapi.ResourceClaimSpec {
	t.Helper()
	s, err := allocation.ParseClaimSpec([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tensorParallel4 is one pod's claim: four GPUs that are all pairwise NVLinked.
const tensorParallel4 = `
devices:
  requests:
  - name: tp
    exactly: {deviceClassName: gpu.gpudra.dev, count: 4}
  constraints:
  - matchAttribute: gpu.gpudra.dev/nvlinkClique
`

func pipeline(t *testing.T, name string) gang.PodSet {
	return gang.PodSet{Name: name, Count: 4, Claims: []resourceapi.ResourceClaimSpec{spec(t, tensorParallel4)}, Required: topology.LevelRack}
}

func checkJob(t *testing.T, p *gang.Placement, net *topology.Network, sets ...string) {
	t.Helper()
	used := map[string]bool{}
	for _, s := range sets {
		racks := map[string]bool{}
		for i, node := range p.Nodes[s] {
			if used[node] {
				t.Errorf("%s pod %d shares node %s with another tensor-parallel group", s, i, node)
			}
			used[node] = true
			racks[net.DomainOf(node, topology.LevelRack)] = true
			if got := len(p.Allocations[s][i][0].Devices.Results); got != 4 {
				t.Errorf("%s pod %d got %d GPUs", s, i, got)
			}
		}
		if len(racks) != 1 {
			t.Errorf("pipeline %s spans racks %v", s, racks)
		}
	}
}

func TestThreeDParallelJob(t *testing.T) {
	ctx := context.Background()
	t.Run("two pipelines of four 4-GPU stages land one per rack", func(t *testing.T) {
		st, net := cluster(t, 2, 4)
		p, after, err := gang.Plan(ctx, st, net, nil, []gang.PodSet{pipeline(t, "dp0"), pipeline(t, "dp1")})
		if err != nil {
			t.Fatal(err)
		}
		checkJob(t, p, net, "dp0", "dp1")
		if p.Domains["dp0"] == p.Domains["dp1"] {
			t.Errorf("both pipelines in %s", p.Domains["dp0"])
		}
		// The plan holds all 32 GPUs: a second job does not fit, but did before on st.
		if _, _, err := gang.Plan(ctx, after, net, nil, []gang.PodSet{pipeline(t, "again")}); !gang.IsUnplaceable(err) {
			t.Errorf("second pipeline after the job: err = %v, want unplaceable", err)
		}
		if _, _, err := gang.Plan(ctx, st, net, nil, []gang.PodSet{pipeline(t, "again")}); err != nil {
			t.Errorf("planning modified the input state: %v", err)
		}
	})
	t.Run("one pod set sliced into pipelines per rack", func(t *testing.T) {
		st, net := cluster(t, 2, 4)
		set := gang.PodSet{Name: "workers", Count: 8, Claims: []resourceapi.ResourceClaimSpec{spec(t, tensorParallel4)},
			Required: topology.LevelBlock, SliceSize: 4, SliceRequired: topology.LevelRack}
		p, _, err := gang.Plan(ctx, st, net, nil, []gang.PodSet{set})
		if err != nil {
			t.Fatal(err)
		}
		for slice := range 2 {
			racks := map[string]bool{}
			for _, n := range p.Nodes["workers"][slice*4 : slice*4+4] {
				racks[net.DomainOf(n, topology.LevelRack)] = true
			}
			if len(racks) != 1 {
				t.Errorf("pipeline %d spans racks %v", slice, racks)
			}
		}
	})
	t.Run("a busy GPU in one rack leaves the job unplaceable, and says why", func(t *testing.T) {
		st, net := cluster(t, 2, 4)
		if _, err := st.AllocateAndCommit(ctx, "r2-n3", claimOf(t, `
devices:
  requests:
  - name: gpu
    exactly: {deviceClassName: gpu.gpudra.dev}
`)); err != nil {
			t.Fatal(err)
		}
		_, _, err := gang.Plan(ctx, st, net, nil, []gang.PodSet{pipeline(t, "dp0"), pipeline(t, "dp1")})
		if !gang.IsUnplaceable(err) {
			t.Fatalf("err = %v, want unplaceable", err)
		}
		for _, want := range []string{"podSet dp1", "any single rack", "b1/r2 fits 3 of 4"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("reason %q does not say %q", err, want)
			}
		}
	})
	t.Run("more GPUs per pod than any node has is bad input (rejected), not a retry", func(t *testing.T) {
		st, net := cluster(t, 1, 2)
		big := strings.Replace(tensorParallel4, "count: 4", "count: 8", 1)
		_, _, err := gang.Plan(ctx, st, net, nil, []gang.PodSet{{Name: "big", Count: 1, Claims: []resourceapi.ResourceClaimSpec{spec(t, big)}}})
		if err == nil || gang.IsUnplaceable(err) || !strings.Contains(err.Error(), "do not fit on any of the 2 nodes even with all their devices free") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("an unknown topology level is bad input, not a retry", func(t *testing.T) {
		st, net := cluster(t, 1, 1)
		set := pipeline(t, "dp0")
		set.Required = "tor-switch"
		_, _, err := gang.Plan(ctx, st, net, nil, []gang.PodSet{set})
		if err == nil || gang.IsUnplaceable(err) || !strings.Contains(err.Error(), "accepted values are block, rack, tor, hostname") {
			t.Fatalf("err = %v", err)
		}
	})
}

func claimOf(t *testing.T, y string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{Spec: spec(t, y)}
	c.Name, c.Namespace, c.UID = "busy", "default", "busy"
	return c
}

func TestNodeSelectorLimitsCandidates(t *testing.T) {
	st, _ := cluster(t, 2, 2)
	labels := map[string]map[string]string{}
	for _, n := range []string{"r1-n1", "r1-n2", "r2-n1", "r2-n2"} {
		labels[n] = map[string]string{api.LabelBlock: "b1", api.LabelRack: n[:2], "pool": "train"}
	}
	labels["r1-n1"]["pool"] = "serve"
	net, err := topology.NetworkFromLabels(labels, topology.DefaultLabelKeys)
	if err != nil {
		t.Fatal(err)
	}
	set := gang.PodSet{Name: "tp", Count: 3, Claims: []resourceapi.ResourceClaimSpec{spec(t, tensorParallel4)}, NodeSelector: map[string]string{"pool": "train"}}
	p, _, err := gang.Plan(context.Background(), st, net, nil, []gang.PodSet{set})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range p.Nodes["tp"] {
		if n == "r1-n1" {
			t.Errorf("pod placed on %s, which its node selector excludes", n)
		}
	}
	set.Count = 4
	if _, _, err := gang.Plan(context.Background(), st, net, nil, []gang.PodSet{set}); !gang.IsUnplaceable(err) {
		t.Errorf("4 pods on 3 selectable nodes: err = %v", err)
	}
}

// TestFailedSliceLeavesNothingBehind: a slice that fits only partly in the first rack it
// tries goes to the next rack, and the GPUs the failed try took in the first rack are free
// again in the state the plan returns.
func TestFailedSliceLeavesNothingBehind(t *testing.T) {
	ctx := context.Background()
	st, net := cluster(t, 2, 2)
	busy := &resourceapi.ResourceClaim{Spec: spec(t, tensorParallel4)}
	busy.Name, busy.Namespace, busy.UID = "busy", "other", "busy"
	if _, err := st.AllocateAndCommit(ctx, "r1-n2", busy); err != nil {
		t.Fatal(err)
	}
	set := gang.PodSet{Name: "workers", Count: 2, Claims: []resourceapi.ResourceClaimSpec{spec(t, tensorParallel4)},
		Required: topology.LevelBlock, SliceSize: 2, SliceRequired: topology.LevelRack}
	p, after, err := gang.Plan(ctx, st, net, nil, []gang.PodSet{set})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(p.Nodes["workers"], ","); got != "r2-n1,r2-n2" {
		t.Fatalf("slice on %s, want r2-n1,r2-n2 (rack r1 has one free node)", got)
	}
	// The first try put pod 0 on r1-n1 before pod 1 found r1-n2 full.
	again := &resourceapi.ResourceClaim{Spec: spec(t, tensorParallel4)}
	again.Name, again.Namespace, again.UID = "again", "other", "again"
	if _, err := after.Allocate(ctx, "r1-n1", again); err != nil {
		t.Errorf("r1-n1 after the plan: %v; want its GPUs free (the failed try released them)", err)
	}
}

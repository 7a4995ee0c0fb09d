package fragmentation

import (
	"context"
	"fmt"
	"math"
	"slices"

	"k8s.io/apimachinery/pkg/util/sets"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpudra/gpudra/topology/placement"
)

var (
	_ fwk.PlacementScorePlugin     = (*Plugin)(nil)
	_ fwk.PlacementScoreExtensions = (*Plugin)(nil)
)

// ScorePlacement rates one feasible placement of a pod group — with the PodGroup API's
// topology constraints, one rack or block from the TopologyPlacement generator — by the
// GPU fragmentation the whole group adds on the nodes it would use: each pod takes the
// GPUs the allocator's first fit would give it, and FGD's measure of every touched node
// is compared before and after. The raw score is minus the added expected unusable
// milli-GPU; NormalizePlacementScore maps the placements onto 0–100.
func (p *Plugin) ScorePlacement(ctx context.Context, _ fwk.PlacementCycleState, _ fwk.PodGroupInfo, a *fwk.PodGroupAssignments) (int64, *fwk.Status) {
	infos := map[string]fwk.NodeInfo{}
	for _, ni := range a.Nodes {
		infos[ni.Node().Name] = ni
	}
	pods := map[string][]placement.Pod{}
	vendors := map[string][]string{} // by node: the GPU vendors its pods take, nil for any
	anyVendor := map[string]bool{}
	for _, pa := range a.ProposedAssignments {
		name := pa.GetNodeName()
		ni, ok := infos[name]
		if !ok {
			return 0, fwk.AsStatus(fmt.Errorf("placement %s assigns pods to node %s, which it does not contain", a.Name, name))
		}
		d, err := readDemand(pa.GetPod(), p.dra.ResourceClaims(), p.dra.DeviceClassResolver())
		if err != nil {
			return 0, fwk.AsStatus(err)
		}
		// Devices the policy does not model: the pod counts with its CPU only.
		pod, _ := d.on(ni.GetAllocatable().GetScalarResources())
		pods[name] = append(pods[name], pod)
		if vs := d.vendorsOn(ni.GetAllocatable().GetScalarResources()); vs == nil {
			anyVendor[name] = true
		} else {
			for _, v := range vs {
				if !slices.Contains(vendors[name], v) {
					vendors[name] = append(vendors[name], v)
				}
			}
		}
	}
	gpus, err := p.gpusOf(sets.KeySet(pods))
	if err != nil {
		return 0, fwk.AsStatus(err)
	}
	var added float64
	for name, onNode := range pods {
		g := gpus[name]
		if !anyVendor[name] {
			g = g.of(vendors[name])
		}
		n := nodeOf(infos[name], g)
		n.GPUFree, n.Tags = slices.Clone(n.GPUFree), map[int]int{}
		before := placement.Fragmentation(p.typical, n.Model, n.CPUFree, n.GPUFree)
		for i := range onNode {
			pod := &onNode[i]
			if err := n.Place(pod, placement.FirstFitGPUs(n, pod)); err != nil {
				// The scheduler found the placement feasible; GPUs the model cannot
				// place (e.g. held by devices it does not count) make it the worst.
				return math.MinInt32, nil
			}
		}
		added += placement.Fragmentation(p.typical, n.Model, n.CPUFree, n.GPUFree) - before
	}
	return -int64(math.Round(added)), nil
}

func (p *Plugin) PlacementScoreExtensions() fwk.PlacementScoreExtensions { return p }

// NormalizePlacementScore maps the placements' raw scores onto MinScore–MaxScore, the
// least fragmenting placement getting MaxScore (all of them when they are equal).
func (p *Plugin) NormalizePlacementScore(ctx context.Context, _ fwk.PodGroupCycleState, _ fwk.PodGroupInfo, scores []fwk.PlacementScore) *fwk.Status {
	if len(scores) == 0 {
		return nil
	}
	lo, hi := scores[0].Score, scores[0].Score
	for _, s := range scores {
		lo, hi = min(lo, s.Score), max(hi, s.Score)
	}
	for i := range scores {
		if hi == lo {
			scores[i].Score = fwk.MaxScore
		} else {
			scores[i].Score = fwk.MinScore + (scores[i].Score-lo)*(fwk.MaxScore-fwk.MinScore)/(hi-lo)
		}
	}
	return nil
}

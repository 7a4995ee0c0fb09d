package sim

import (
	"context"
	"math"
	"testing"

	"github.com/gpudra/gpudra/data/traces"
	"github.com/gpudra/gpudra/sim/reproduction"
	"github.com/gpudra/gpudra/topology/placement"
)

// The headline of the placement docs, on the traces that ship with gpudra: in reproduction
// mode the default trace's mean over the paper's ten seeds is the paper's published FGD and
// DotProd figure to the hundredth, and gpudra's policy in DRA mode, where the allocator
// chooses every GPU, allocates at least FGD's published figure (seed 42).
func TestDefaultTraceReachesThePublishedFigures(t *testing.T) {
	published := reproduction.Published["default"]
	run := func(mode Mode, policy string, seeds []int64) float64 {
		t.Helper()
		runs, err := Execute(context.Background(), Experiment{Files: traces.AlibabaGPU2023(), Traces: []string{"default"},
			Modes: []Mode{mode}, Policies: []string{policy}, Seeds: seeds, Parallel: 2}, nil)
		if err != nil || len(runs) != len(seeds) {
			t.Fatalf("%s %s: %d runs, %v", mode, policy, len(runs), err)
		}
		var curves []reproduction.Curve
		for _, r := range runs {
			if r.Refused != 0 {
				t.Errorf("%s %s seed %d: the allocator refused %d placements the policy found feasible", mode, policy, r.Seed, r.Refused)
			}
			curves = append(curves, r.Curve)
		}
		return reproduction.MeanCurve(curves).At130()
	}
	for _, policy := range []string{placement.FGDName, reproduction.DotProdName} {
		got, want := run(Reproduction, policy, reproduction.Seeds), published[policy]
		if math.IsNaN(got) || math.Abs(got-want) > 0.005 {
			t.Errorf("reproduction %s, seeds %v: %.2f %% at 130 %%, published %.2f %%", policy, reproduction.Seeds, got, want)
		}
	}
	if got, want := run(DRA, placement.GpudraName, []int64{42}), published[placement.FGDName]; !(got >= want) {
		t.Errorf("DRA gpudra, seed 42: %.2f %% at 130 %%, below FGD's published %.2f %%", got, want)
	}
}

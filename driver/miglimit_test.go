package driver_test

import (
	"testing"
)

// A MIG profile with the media engines has a placement on every slice, and a GPU holds
// one instance of it: the scheduler hands out one per GPU, beside other profiles.
func TestDynamicMIGHoldsMediaEngineProfilesToOnePerGPU(t *testing.T) {
	for _, tc := range []struct{ profile, me, plain string }{
		{"dgx-h100", "1g.10gb+me", "1g.10gb"},
		{"dgx-a100", "1g.5gb+me", "1g.5gb"},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			_, slices := simNode(t, tc.profile, "n")
			st := newState(t, slices)
			mustAllocate(t, st, "n", migOn(0, tc.me))
			mustNotFit(t, st, "n", "a second "+tc.me+" on GPU 0", migOn(0, tc.me))
			mustAllocate(t, st, "n", migOn(0, tc.plain))
			mustAllocate(t, st, "n", migOn(1, tc.me))
		})
	}
}

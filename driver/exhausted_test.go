package driver_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gpudra/gpudra/driver/allocation"
)

// Exhausted lets a planner skip a node without running the allocator, so it must never say
// so while some claim still fits: on nodes filled at random with whole GPUs, NVLink groups,
// shares and MIG devices, whenever it reports the node exhausted, no claim shape fits. And
// it must say so for a node whose GPUs are all taken, or it saves nothing.
func TestExhaustedNeverHidesAFreeDevice(t *testing.T) {
	for _, tc := range []struct {
		profile string
		gpus    int
		mig     string
	}{
		{"dgx-h100", 8, "1g.10gb"},
		{"dgx-a100", 8, "1g.5gb"},
		{"dgx-v100", 8, ""},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			shapes := []string{wholeGPU, fourGPUGroup, strings.Replace(fourGPUGroup, "== 4", "== 2", 1)}
			for i := range tc.gpus {
				shapes = append(shapes, gpuByIndex(i), shareOn(i, "1Gi", "10"))
				if tc.mig != "" {
					shapes = append(shapes, migOn(i, tc.mig))
				}
			}
			exhaustedSeen := 0
			for seed := range uint64(6) {
				rng := rand.New(rand.NewPCG(seed, 1))
				_, rs := simNode(t, tc.profile, "n")
				st := newState(t, rs)
				for step := 0; step < 200; step++ {
					if st.Exhausted("n") {
						exhaustedSeen++
						for _, shape := range shapes {
							if _, err := st.Clone().Allocate(context.Background(), "n", claim(t, shape)); !errors.Is(err, allocation.ErrUnsatisfiable) {
								t.Fatalf("seed %d step %d: node reported exhausted, but this claim gets %v:\n%s", seed, step, err, shape)
							}
						}
						break
					}
					allocate(t, st, "n", shapes[rng.IntN(len(shapes))])
				}
			}
			t.Logf("%d of 6 random fills ended exhausted", exhaustedSeen)
			if exhaustedSeen == 0 {
				t.Errorf("no random fill was ever reported exhausted")
			}
			// All GPUs taken whole: exhausted.
			_, rs := simNode(t, tc.profile, "full")
			st := newState(t, rs)
			for i := range tc.gpus {
				if st.Exhausted("full") {
					t.Fatalf("exhausted with %d of %d GPUs taken", i, tc.gpus)
				}
				mustAllocate(t, st, "full", gpuByIndex(i))
			}
			if !st.Exhausted("full") {
				t.Errorf("%s with all %d GPUs allocated whole: not exhausted", tc.profile, tc.gpus)
			}
			if st.Exhausted("other") != true {
				t.Errorf("a node without slices has no device to give: %s", fmt.Sprint(st.Exhausted("other")))
			}
		})
	}
}

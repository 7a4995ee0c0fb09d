package sim

import (
	"context"
	"testing"
)

func TestDefragExperimentStartsLargeJobsSooner(t *testing.T) {
	e := DefragExperiment{Nodes: 8, Steps: 40, LargeEvery: 4, MaxEvictions: 16, Seed: 1}
	rows, err := e.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + FormatDefragTable(rows))
	base, moved := rows[0], rows[1]
	if base.LargeArrived != moved.LargeArrived || base.LargeArrived == 0 {
		t.Fatalf("arrivals differ or none: %+v", rows)
	}
	if moved.Plans == 0 || moved.LargeStarted <= base.LargeStarted || moved.LargeWait >= base.LargeWait {
		t.Errorf("with defragmentation %+v, placement only %+v: want more 8-GPU jobs started, sooner", moved, base)
	}
	for _, r := range rows {
		if !(r.Allocated <= r.Bound && r.Bound <= 100) || r.Bound != rows[0].Bound {
			t.Errorf("%s: %.1f %% allocated, upper bound %.1f %%: want at most the bound, the same for both runs and at most 100", r.Mode, r.Allocated, r.Bound)
		}
	}
	if base.Plans != 0 || base.Evictions != 0 {
		t.Errorf("placement only moved pods: %+v", base)
	}
}

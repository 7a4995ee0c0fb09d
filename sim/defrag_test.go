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
	if base.Plans != 0 || base.Evictions != 0 {
		t.Errorf("placement only moved pods: %+v", base)
	}
}

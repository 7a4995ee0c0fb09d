package mover

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The gauges show the planner's report of the cluster the controller reads: on two 4-GPU
// nodes, n1 with a half-GPU share on GPU 0 and n2 with a 2-GPU job and a share on GPU 2
// (neither movable), 4 GPUs are free, all scattered beside used ones, and a GPU's worth is
// left on the shared GPUs. With n1's share movable one move frees n1; without, no plan frees
// a node and the move gauges are absent.
func TestMeasureSetsTheGaugesToThePlannersReport(t *testing.T) {
	for _, tc := range []struct {
		name    string
		movable bool
	}{
		{"a movable share: one move frees n1", true},
		{"nothing movable: no plan, no move gauges", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.run(t, "share-1", "n1", 1, 500, []int{0}, tc.movable, "")
			m := newMover(w.client(t))
			if err := m.Measure(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, g := range []struct {
				name string
				c    prometheus.Collector
				want float64
			}{
				{"free GPUs", freeGPUs, 4},
				{"free nodes", freeNodes, 0},
				{"stranded by shares", stranded.WithLabelValues(CauseShares), 1},
				{"stranded scattered", stranded.WithLabelValues(CauseScattered), 4},
				{"stranded MIG", stranded.WithLabelValues(CauseMIG), 0},
			} {
				if got := testutil.ToFloat64(g.c); got != g.want {
					t.Errorf("%s: %v, want %v", g.name, got, g.want)
				}
			}
			if got := testutil.ToFloat64(fragmentation); !(got > 0) {
				t.Errorf("fragmentation %v: want more than 0 with shares and scattered GPUs", got)
			}
			for _, g := range []*prometheus.GaugeVec{freeNodeMoves, freeNodeEvictions} {
				n := testutil.CollectAndCount(g)
				switch {
				case tc.movable && (n != 1 || testutil.ToFloat64(g.WithLabelValues()) != 1):
					t.Errorf("move gauges: %d series; want one, of 1", n)
				case !tc.movable && n != 0:
					t.Errorf("move gauges: %d series without a plan; want none", n)
				}
			}
		})
	}
}

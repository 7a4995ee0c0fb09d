package reproduction

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpudra/gpudra/topology/placement"
)

func testCluster(gpus int) []placement.NodeSpec {
	var nodes []placement.NodeSpec
	for k := range gpus / 2 {
		nodes = append(nodes, placement.NodeSpec{Name: fmt.Sprintf("openb-node-%04d", k), CPU: 64000, Memory: 1 << 18, GPUs: 2, Model: "T4"})
	}
	return nodes
}

func testPods(n int, milli int64) []placement.Pod {
	var pods []placement.Pod
	for k := range n {
		pods = append(pods, placement.Pod{Name: fmt.Sprintf("openb-pod-%04d", k), CPU: 1000, GPUs: 1, GPUMilli: milli})
	}
	return pods
}

func mustWorkload(t *testing.T, seed int64, pods []placement.Pod, nodes []placement.NodeSpec) Workload {
	t.Helper()
	w, err := NewWorkload(seed, pods, nodes)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func demand(pods []placement.Pod) int64 {
	var s int64
	for k := range pods {
		s += pods[k].Demand()
	}
	return s
}

func TestWorkloadInflatesTo130Percent(t *testing.T) {
	nodes := testCluster(100) // 100 000 milli; target 130 000
	pods := testPods(40, 700)
	w := mustWorkload(t, 42, pods, nodes)
	if got := demand(w.Arrivals); got > 130000 || got+700 <= 130000 {
		t.Fatalf("arrived demand %d: want the last copy that still fits under 130000", got)
	}
	if len(w.Arrivals) <= len(pods) || w.Arrivals[len(pods)].Name[len("openb-pod-0000"):][:7] != "-tuned-" {
		t.Fatalf("copies must follow the shuffled originals: %v", w.Arrivals[len(pods)].Name)
	}
	again := mustWorkload(t, 42, pods, nodes)
	if !reflect.DeepEqual(w.Arrivals, again.Arrivals) || !reflect.DeepEqual(w.Ranks, again.Ranks) {
		t.Fatal("the same seed must give the same workload")
	}
	ranks := slices.Clone(w.Ranks)
	slices.Sort(ranks)
	for k, r := range ranks {
		if r != k {
			t.Fatalf("ranks are not a permutation: %v", w.Ranks)
		}
	}
}

func TestWorkloadDeflatesTo130Percent(t *testing.T) {
	nodes := testCluster(10) // target 13 000
	w := mustWorkload(t, 42, testPods(40, 1000), nodes)
	if got := demand(w.Arrivals); got > 13000 || got < 12000 {
		t.Fatalf("arrived demand %d, want just under 13000", got)
	}
}

func TestCurveBinsLikeThePaper(t *testing.T) {
	// Capacity 10 000: 1 % = 100 milli.
	events := []Event{{50, 50}, {150, 150}, {140, 250}, {300, 449}, {300, 451}}
	c := NewCurve(events, 10000)
	// Bin 0 (A=50 → 0.5 rounds to even 0): 0.5; bin 2 (1.5 → 2; 2.5 → 2): mean(1.5, 1.4);
	// bin 1 is empty: mean of bins 0..2; bin 4: 3.0 (4.49); bin 5: 3.0 (4.51).
	want := map[int]float64{0: 0.5, 1: 1.13, 2: 1.45, 4: 3, 5: 3}
	for x, v := range want {
		if c[x] != v {
			t.Errorf("point %d = %v, want %v", x, c[x], v)
		}
	}
}

func TestWorkloadRefusesWhatCannotReach130Percent(t *testing.T) {
	big := make([]placement.NodeSpec, MaxNodes)
	for k := range big {
		big[k] = placement.NodeSpec{Name: fmt.Sprintf("openb-node-%04d", k), CPU: 64000, Memory: 1 << 18, GPUs: 32, Model: "T4"}
	}
	cases := []struct {
		name  string
		pods  []placement.Pod
		nodes []placement.NodeSpec
		want  string
	}{
		{"no pods", nil, testCluster(8), "pods: none of the 0 pods asks for GPUs, so no copies of them reach 130 % of the nodes' 8 GPUs"},
		{"only CPU pods", []placement.Pod{{Name: "a", CPU: 1000}, {Name: "b", CPU: 2000}}, testCluster(8), "pods: none of the 2 pods asks for GPUs"},
		{"copies past MaxArrivals", testPods(3, 10), big, "takes more than 2000000 pods, the most a workload may have"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := NewWorkload(42, c.pods, c.nodes); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestWorkloadWithoutGPUsHasNoCurve(t *testing.T) {
	nodes := []placement.NodeSpec{{Name: "openb-node-0000", CPU: 64000, Memory: 1 << 18}}
	w := mustWorkload(t, 42, append(testPods(3, 500), placement.Pod{Name: "cpu", CPU: 1000}), nodes)
	res, err := Replay(nodes, w, BestFit{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if demand(w.Arrivals) != 0 {
		t.Errorf("arrived demand %d, want 0: no GPUs, no GPU pods", demand(w.Arrivals))
	}
	for x, v := range res.Curve {
		if !math.IsNaN(v) {
			t.Fatalf("Curve[%d] = %v, want NaN: no share of no GPU capacity", x, v)
		}
	}
}

package sim

import (
	"testing"

	"github.com/gpudra/gpudra/data/traces"
	"github.com/gpudra/gpudra/sim/reproduction"
)

// dataSetups are the baseline (fragmentation alone) and gpudra-scheduler's default weights.
var dataSetups = []struct {
	name string
	s    DataSetup
}{
	{"fragmentation", DataSetup{Datasets: 8, CachedShare: 0.25, FragWeight: 5}},
	{"fragmentation+data", DataSetup{Datasets: 8, CachedShare: 0.25, FragWeight: 5, DataWeight: 3}},
}

// TestDataScoreMovesPodsToTheirData: on the start of the default trace, the data score puts
// more GPU pods on nodes caching their dataset than fragmentation alone does.
func TestDataScoreMovesPodsToTheirData(t *testing.T) {
	files := traces.AlibabaGPU2023()
	nodes, err := reproduction.LoadNodesFrom(files, reproduction.NodeListFile)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := reproduction.LoadPodsFrom(files, reproduction.PodListFile("default"))
	if err != nil {
		t.Fatal(err)
	}
	pods = pods[:1000]
	var got [2]DataResult
	for k, c := range dataSetups {
		if got[k], err = ReplayData(nodes, pods, c.s, 42); err != nil {
			t.Fatal(err)
		}
	}
	if got[1].LocalShare() <= got[0].LocalShare()+0.2 {
		t.Errorf("GPU pods on caching nodes: %.2f with the data score, %.2f without; want at least 20 points more", got[1].LocalShare(), got[0].LocalShare())
	}
	if _, err := ReplayData(nodes, pods, DataSetup{Datasets: 0}, 42); err == nil {
		t.Error("a setup without datasets is accepted")
	}
}

// BenchmarkDataLocality replays a trace (env-free: the default trace, seed 42) with and
// without the data score and reports the share of GPU pods on caching nodes and the GPUs
// allocated (docs/benchmarks.md#data-locality).
func BenchmarkDataLocality(b *testing.B) {
	files := traces.AlibabaGPU2023()
	nodes, err := reproduction.LoadNodesFrom(files, reproduction.NodeListFile)
	if err != nil {
		b.Fatal(err)
	}
	pods, err := reproduction.LoadPodsFrom(files, reproduction.PodListFile("default"))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range dataSetups {
		b.Run(c.name, func(b *testing.B) {
			var r DataResult
			for b.Loop() {
				if r, err = ReplayData(nodes, pods, c.s, 42); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(100*r.LocalShare(), "local-%")
			b.ReportMetric(100*r.Allocated, "allocated-%")
			b.Logf("%s: %d GPU pods placed, %d on a caching node", c.name, r.GPUPods, r.Local)
		})
	}
}

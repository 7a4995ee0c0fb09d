package fragmentation

import (
	"fmt"
	"testing"
	"time"

	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	plfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources"

	"github.com/gpudra/gpudra/topology/placement"
)

// BenchmarkScorePerNode is what the plugin costs kube-scheduler per candidate node and
// pod (PreScore's reading of slices and allocations spread over the nodes, plus Score),
// beside NodeResourcesFit's LeastAllocated scoring of the same pod on the same nodes, in
// the same run. The cluster: 200 GPU nodes of 2, 4 and 8 GPUs, a third of the GPUs
// partly shared; the pod: a 50 % share.
func BenchmarkScorePerNode(b *testing.B) {
	var specs []placement.NodeSpec
	for i := range 200 {
		specs = append(specs, placement.NodeSpec{Name: fmt.Sprintf("node-%03d", i), CPU: 64000, Memory: 262144, GPUs: 2 << (i % 3), Model: "V100M32"})
	}
	l := newLab(b, specs)
	pl := newPlugin(b, l, replayArgs)
	for i, s := range specs {
		if i%3 == 0 {
			p := placement.Pod{Name: fmt.Sprintf("busy-%d", i), CPU: 1000, Memory: 1024, GPUs: 1, GPUMilli: 300}
			pod := l.submit(&p, int64(1000+i))
			claim, _ := l.dra.ResourceClaims().Get("default", p.Name)
			l.bind(pod, claim, s.Name)
		}
	}
	p := placement.Pod{Name: "share", CPU: 2000, Memory: 4096, GPUs: 1, GPUMilli: 500}
	pod := l.submit(&p, 1)
	var nodes []fwk.NodeInfo
	for _, s := range specs {
		nodes = append(nodes, l.infos[s.Name])
	}
	fit, err := noderesources.NewFit(l.ctx, &config.NodeResourcesFitArgs{ScoringStrategy: &config.ScoringStrategy{
		Type: config.LeastAllocated, Resources: []config.ResourceSpec{{Name: "cpu", Weight: 1}, {Name: "memory", Weight: 1}},
	}}, handle{dra: l.dra}, plfeature.Features{})
	if err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, pre fwk.PreScorePlugin, score fwk.ScorePlugin) {
		var elapsed time.Duration
		for b.Loop() {
			start := time.Now()
			cs := framework.NewCycleState()
			if st := pre.PreScore(l.ctx, cs, pod, nodes); !st.IsSuccess() {
				b.Fatal(st)
			}
			for _, ni := range nodes {
				if _, st := score.Score(l.ctx, cs, pod, ni); !st.IsSuccess() {
					b.Fatal(st)
				}
			}
			elapsed += time.Since(start)
		}
		b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N*len(nodes)), "ns/node")
	}
	b.Run("GPUFragmentation", func(b *testing.B) { run(b, pl, pl) })
	b.Run("NodeResourcesFit", func(b *testing.B) {
		f := fit.(interface {
			fwk.PreScorePlugin
			fwk.ScorePlugin
		})
		run(b, f, f)
	})
}

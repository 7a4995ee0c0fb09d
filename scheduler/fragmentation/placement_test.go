package fragmentation

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/gpudra/gpudra/topology/placement"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// assignment is one pod of a group proposed onto a node.
type assignment struct {
	pod  *corev1.Pod
	node string
}

func (a assignment) GetPod() *corev1.Pod           { return a.pod }
func (a assignment) GetPodInfo() fwk.PodInfo       { return nil }
func (a assignment) GetNodeName() string           { return a.node }
func (a assignment) GetCycleState() fwk.CycleState { return nil }

// TestPlacementKeepsWholeNodesFree scores placements of a gang of two 4-GPU pods on
// 8-GPU nodes when the workload also runs 8-GPU jobs: completing two half-used nodes
// (rack-a) beats packing both pods onto one idle node (rack-b, packed), which beats
// breaking into two idle nodes (rack-b, spread) — whether the pods ask for their GPUs by
// claims or by the gpu class's extended resource.
func TestPlacementKeepsWholeNodesFree(t *testing.T) {
	nodes := []placement.NodeSpec{
		{Name: "a1", CPU: 96000, Memory: 786432, GPUs: 8, Model: "V100M32"},
		{Name: "a2", CPU: 96000, Memory: 786432, GPUs: 8, Model: "V100M32"},
		{Name: "b1", CPU: 96000, Memory: 786432, GPUs: 8, Model: "V100M32"},
		{Name: "b2", CPU: 96000, Memory: 786432, GPUs: 8, Model: "V100M32"},
	}
	l := newLab(t, nodes)
	pl := newPlugin(t, l, Args{TypicalPods: []TypicalPod{
		{CPU: resource.MustParse("8"), GPUs: 1, GPUMilli: 1000, Count: 10},
		{CPU: resource.MustParse("32"), GPUs: 8, GPUMilli: 1000, Count: 5},
	}})
	for i, n := range []string{"a1", "a2"} { // rack-a's nodes are half used
		p := placement.Pod{Name: fmt.Sprintf("busy-%d", i), CPU: 16000, Memory: 65536, GPUs: 4, GPUMilli: 1000}
		pod := l.submit(&p, int64(100+i))
		claim, _ := l.dra.ResourceClaims().Get("default", p.Name)
		l.bind(pod, claim, n)
	}
	for _, way := range []struct {
		name   string
		submit func(p *placement.Pod, uid int64) *corev1.Pod
	}{
		{"claims", l.submit},
		{"extended-resources", func(p *placement.Pod, _ int64) *corev1.Pod { // kube-scheduler makes the claim
			return extendedPod(p, corev1.ResourceList{corev1.ResourceName(resourceapi.ResourceDeviceClassPrefix + api.DeviceClassGPU): *resource.NewQuantity(int64(p.GPUs), resource.DecimalSI)})
		}},
	} {
		t.Run(way.name, func(t *testing.T) {
			var gang []*corev1.Pod
			for i := range 2 {
				p := placement.Pod{Name: fmt.Sprintf("%s-worker-%d", way.name, i), CPU: 16000, Memory: 65536, GPUs: 4, GPUMilli: 1000}
				gang = append(gang, way.submit(&p, int64(200+i)))
			}
			placementOf := func(name string, on ...string) *fwk.PodGroupAssignments {
				a := &fwk.PodGroupAssignments{Placement: &fwk.Placement{Name: name}}
				seen := map[string]bool{}
				for i, n := range on {
					a.ProposedAssignments = append(a.ProposedAssignments, assignment{pod: gang[i], node: n})
					if !seen[n] {
						seen[n] = true
						a.Nodes = append(a.Nodes, l.infos[n])
					}
				}
				return a
			}
			candidates := []*fwk.PodGroupAssignments{
				placementOf("rack-a", "a1", "a2"),
				placementOf("rack-b-packed", "b1", "b1"),
				placementOf("rack-b-spread", "b1", "b2"),
			}
			scores := make([]fwk.PlacementScore, len(candidates))
			for i, c := range candidates {
				s, st := pl.ScorePlacement(l.ctx, nil, nil, c)
				if !st.IsSuccess() {
					t.Fatalf("%s: %v", c.Name, st)
				}
				scores[i] = fwk.PlacementScore{Placement: c.Placement, Score: s}
			}
			raw := fmt.Sprint(scores[0].Score, scores[1].Score, scores[2].Score)
			if st := pl.NormalizePlacementScore(l.ctx, framework.NewCycleState(), nil, scores); !st.IsSuccess() {
				t.Fatal(st)
			}
			a, packed, spread := scores[0].Score, scores[1].Score, scores[2].Score
			if !(a == fwk.MaxScore && a > packed && packed > spread && spread == fwk.MinScore) {
				t.Fatalf("normalized scores rack-a %d, rack-b packed %d, rack-b spread %d (raw %s); want rack-a best, spread worst", a, packed, spread, raw)
			}
			t.Logf("raw %s → normalized %d, %d, %d", raw, a, packed, spread)
		})
	}
}

package reproduction

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gpudra/gpudra/topology/placement"
)

// node builds a node with the given CPU left (of 96000) and per-GPU milli left.
func node(model string, cpuFree int64, gpuFree ...int64) *placement.Node {
	n := placement.NewNode(placement.NodeSpec{Name: "n", CPU: 96000, Memory: 1 << 20, GPUs: len(gpuFree), Model: model}, 0)
	n.CPUFree = cpuFree
	copy(n.GPUFree, gpuFree)
	return n
}

func share(cpu, milli int64) *placement.Pod {
	return &placement.Pod{Name: "p", CPU: cpu, GPUs: 1, GPUMilli: milli}
}
func whole(cpu int64, k int) *placement.Pod {
	return &placement.Pod{Name: "p", CPU: cpu, GPUs: k, GPUMilli: 1000}
}
func cpuOnly(cpu int64) *placement.Pod { return &placement.Pod{Name: "p", CPU: cpu} }

func TestPolicyFormulas(t *testing.T) {
	cases := []struct {
		name   string
		policy placement.Policy
		node   *placement.Node
		pod    *placement.Pod
		want   placement.Choice
	}{
		// DotProd: a = (64000/128000, 1500/8000), b = (8000/128000, 500/8000):
		// a·b = 0.5·0.0625 + 0.1875·0.0625 = 0.04296875; 100·(1 − a·b/2) = 97.85 → 97.
		{"DotProd truncates 100(1 − a·b/2)", DotProd{}, node("T4", 64000, 1000, 500), share(8000, 500), placement.Choice{Score: 97, GPUs: []int{1}}},
		// a·b = 0.2875·0.0625 → 99.1.
		{"DotProd puts a fraction on the tightest fitting GPU", DotProd{}, node("T4", 64000, 1000, 600, 700), share(0, 500), placement.Choice{Score: 99, GPUs: []int{1}}},
		// a·b = 0.4·0.25 → 95.
		{"DotProd gives whole GPUs the lowest free indices", DotProd{}, node("G2", 96000, 1000, 200, 1000, 1000), whole(0, 2), placement.Choice{Score: 95, GPUs: []int{0, 2}}},

		// GpuClustering: base ⌊25·(8000 − L)/8000⌋.
		{"GpuClustering: idle node scores base+25", GpuClustering{}, node("G2", 96000, 1000, 1000), share(0, 500), placement.Choice{Score: 25 + 18, GPUs: []int{0}}},
		{"GpuClustering: same kind only scores base+75", withTags(node("G2", 96000, 300, 1000), map[int]int{0: 1}), nil, share(0, 200), placement.Choice{Score: 75 + 20, GPUs: []int{0}}},
		{"GpuClustering: same kind among others scores base+50", withTags(node("G2", 96000, 300, 0), map[int]int{0: 1, 1: 1}), nil, share(0, 200), placement.Choice{Score: 50 + 24, GPUs: []int{0}}},
		{"GpuClustering: other kinds only scores base", withTags(node("G2", 96000, 1000, 0), map[int]int{1: 1}), nil, share(0, 200), placement.Choice{Score: 21, GPUs: []int{0}}},
		{"GpuClustering: 2-gpu is not 1-gpu", withTags(node("G2", 96000, 1000, 1000, 0), map[int]int{1: 1}), nil, whole(0, 2), placement.Choice{Score: 18, GPUs: []int{0, 1}}},
		{"GpuClustering: CPU pods score 0", GpuClustering{}, node("G2", 96000, 1000), cpuOnly(1000), placement.Choice{}},

		// GpuPacking.
		{"GpuPacking: idle node scores max(33 − G, G)", GpuPacking{}, node("G2", 96000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000), share(0, 100), placement.Choice{Score: 25, GPUs: []int{0}}},
		{"GpuPacking: idle 1-GPU node scores 32", GpuPacking{}, node("T4", 96000, 1000), share(0, 100), placement.Choice{Score: 32, GPUs: []int{0}}},
		{"GpuPacking: free GPUs on a used node score max(50 − u, 33)", GpuPacking{}, node("G2", 96000, 0, 1000, 1000, 1000), whole(0, 2), placement.Choice{Score: 48, GPUs: []int{1, 2}}},
		{"GpuPacking: used GPUs score max(100 − ⌊Σ⌊g·100/1000⌋/10⌋, 50)", GpuPacking{}, node("G2", 96000, 370, 1000, 650), share(0, 300), placement.Choice{Score: 97, GPUs: []int{0}}},
		{"GpuPacking: CPU pods score 0", GpuPacking{}, node("G2", 96000, 500), cpuOnly(1000), placement.Choice{}},

		// BestFit: v = (64000−8000)/128000·0.5 + (1500−500)/8000·0.5 = 0.21875 + 0.0625 → 71.875 → 71.
		{"BestFit truncates 100(1 − v)", BestFit{}, node("T4", 64000, 1000, 500), share(8000, 500), placement.Choice{Score: 71, GPUs: []int{1}}},

		// LeastAllocated: CPU (24000 − 8000)·100/96000 = 16; memory (2^19 − 0)·100/2^20 = 50; (16 + 50)/2 = 33.
		{"kube-scheduler LeastAllocated averages CPU and memory", LeastAllocated{}, withMemory(node("T4", 24000, 500, 1000), 1<<19), share(8000, 300), placement.Choice{Score: 33, GPUs: []int{0}}},
		{"kube-scheduler takes the allocator's first fit, not the tightest", LeastAllocated{}, node("T4", 24000, 1000, 400), share(0, 300), placement.Choice{Score: 62, GPUs: []int{0}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pol := c.policy
			if pol == nil {
				pol = GpuClustering{}
			}
			if got := pol.Score(c.node, c.pod); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func withTags(n *placement.Node, tags map[int]int) placement.Policy {
	n.Tags = tags
	return taggedNode{n}
}

// taggedNode lets a case carry its node in the policy column.
type taggedNode struct{ n *placement.Node }

func (taggedNode) Name() string { return "tagged" }
func (t taggedNode) Score(_ *placement.Node, p *placement.Pod) placement.Choice {
	return GpuClustering{}.Score(t.n, p)
}

func withMemory(n *placement.Node, free int64) *placement.Node {
	n.MemoryFree = free
	return n
}

func TestPolicyNamesInAnyCase(t *testing.T) {
	for spelling, want := range map[string]string{"fgd": FGDName, "GPUPACKING": GpuPackingName, "Kube-Scheduler": KubeName, "gpudra": GpudraName} {
		p, err := NewPolicy(spelling, Setup{})
		if err != nil || p.Name() != want {
			t.Errorf("NewPolicy(%q) = %v, %v; want %s", spelling, p, err, want)
		}
	}
	if _, err := NewPolicy("fgd2", Setup{}); err == nil || !strings.Contains(err.Error(), `unknown policy "fgd2": known policies are BestFit, DotProd, FGD`) {
		t.Errorf("NewPolicy(fgd2) error = %v", err)
	}
}

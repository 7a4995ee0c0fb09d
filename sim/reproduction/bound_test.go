package reproduction

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gpudra/gpudra/data/traces"
	"github.com/gpudra/gpudra/topology/placement"
)

func gpuNode(name, model string, gpus int, cpu, memory int64) placement.NodeSpec {
	return placement.NodeSpec{Name: name, Model: model, GPUs: gpus, CPU: cpu, Memory: memory}
}

func gpuPod(gpus int, milli, cpu, memory int64, models ...string) placement.Pod {
	return placement.Pod{Name: "p", GPUs: gpus, GPUMilli: milli, CPU: cpu, Memory: memory, Models: models}
}

// optimum is the most GPU demand any subset of pods placed feasibly holds, by search.
func optimum(specs []placement.NodeSpec, pods []placement.Pod) int64 {
	nodes := make([]*placement.Node, len(specs))
	for k, s := range specs {
		nodes[k] = placement.NewNode(s, k)
	}
	var best int64
	var walk func(k int, held int64)
	walk = func(k int, held int64) {
		if k == len(pods) {
			best = max(best, held)
			return
		}
		walk(k+1, held) // skipped
		p := &pods[k]
		for _, n := range nodes {
			if !n.Fits(p) {
				continue
			}
			var choices [][]int
			if p.Fractional() {
				for i, g := range n.GPUFree {
					if g >= p.GPUMilli {
						choices = append(choices, []int{i})
					}
				}
			} else if gpus := placement.LowestFree(n.GPUFree, p.GPUs); p.GPUs == 0 || gpus != nil {
				choices = append(choices, gpus)
			}
			for _, gpus := range choices {
				saved := *n
				saved.GPUFree = slices.Clone(n.GPUFree)
				saved.Tags = map[int]int{}
				if err := n.Place(p, gpus); err != nil {
					panic(err)
				}
				walk(k+1, held+p.Demand())
				n.CPUFree, n.MemoryFree, n.Pods, n.GPUFree = saved.CPUFree, saved.MemoryFree, saved.Pods, saved.GPUFree
			}
		}
	}
	walk(0, 0)
	return best
}

func TestUpperBoundOnHandMadeClusters(t *testing.T) {
	const big = 1 << 30
	cases := []struct {
		name  string
		nodes []placement.NodeSpec
		pods  []placement.Pod
		want  int64 // the bound, equal to the optimum where tight is set
		tight bool
	}{
		{"demand below capacity is all of it", []placement.NodeSpec{gpuNode("a", "T4", 2, big, big)},
			[]placement.Pod{gpuPod(1, 500, 0, 0), gpuPod(1, 1000, 0, 0)}, 1500, true},
		{"demand above capacity is the capacity", []placement.NodeSpec{gpuNode("a", "T4", 2, big, big)},
			[]placement.Pod{gpuPod(2, 1000, 0, 0), gpuPod(1, 1000, 0, 0)}, 2000, true},
		{"pods bound to a model count against its GPUs only",
			[]placement.NodeSpec{gpuNode("a", "T4", 1, big, big), gpuNode("b", "P100", 1, big, big)},
			[]placement.Pod{gpuPod(1, 1000, 0, 0, "T4"), gpuPod(1, 1000, 0, 0, "T4")}, 1000, true},
		{"pods accepting two models share their capacity",
			[]placement.NodeSpec{gpuNode("a", "T4", 1, big, big), gpuNode("b", "P100", 1, big, big), gpuNode("c", "G2", 2, big, big)},
			[]placement.Pod{gpuPod(1, 1000, 0, 0, "T4", "P100"), gpuPod(1, 1000, 0, 0, "T4", "P100"), gpuPod(1, 1000, 0, 0, "T4", "P100"), gpuPod(1, 1000, 0, 0)}, 3000, true},
		{"a pod larger than every node counts for nothing",
			[]placement.NodeSpec{gpuNode("a", "T4", 2, big, big)},
			[]placement.Pod{gpuPod(4, 1000, 0, 0), gpuPod(1, 1000, 0, 0)}, 1000, true},
		{"CPU limits the GPUs held", []placement.NodeSpec{gpuNode("a", "T4", 2, 4000, big)},
			[]placement.Pod{gpuPod(1, 1000, 4000, 0), gpuPod(1, 1000, 4000, 0)}, 1000, true},
		{"memory limits the GPUs held", []placement.NodeSpec{gpuNode("a", "T4", 4, big, 1024)},
			[]placement.Pod{gpuPod(2, 1000, 0, 1024), gpuPod(2, 1000, 0, 1024)}, 2000, true},
		{"the knapsack takes the most GPU per CPU first", []placement.NodeSpec{gpuNode("a", "T4", 4, 6000, big)},
			[]placement.Pod{gpuPod(1, 1000, 4000, 0), gpuPod(2, 1000, 2000, 0), gpuPod(1, 500, 4000, 0)}, 3000, true},
		{"the knapsack's last pod counts in part, rounded up", []placement.NodeSpec{gpuNode("a", "T4", 4, 3000, big)},
			[]placement.Pod{gpuPod(1, 1000, 2000, 0), gpuPod(1, 1000, 2000, 0)}, 1500, false},
		{"fragments the bound cannot see: shares of 600 on two GPUs",
			[]placement.NodeSpec{gpuNode("a", "T4", 1, big, big), gpuNode("b", "T4", 1, big, big)},
			[]placement.Pod{gpuPod(1, 600, 0, 0), gpuPod(1, 600, 0, 0), gpuPod(1, 600, 0, 0)}, 1800, false},
		{"CPU-only pods hold no GPUs", []placement.NodeSpec{gpuNode("a", "T4", 1, 1000, big)},
			[]placement.Pod{{Name: "cpu", CPU: 1000}, gpuPod(1, 1000, 1000, 0)}, 1000, true},
		{"no GPU node holds nothing", []placement.NodeSpec{{Name: "cpu", CPU: big, Memory: big}},
			[]placement.Pod{gpuPod(1, 1000, 0, 0)}, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := UpperBound(c.nodes, c.pods)
			got := ev[len(ev)-1].Allocated
			opt := optimum(c.nodes, c.pods)
			if got != c.want {
				t.Errorf("bound %d, want %d (optimum %d)", got, c.want, opt)
			}
			if got < opt {
				t.Errorf("bound %d is below the optimum %d", got, opt)
			}
			if c.tight && got != opt {
				t.Errorf("bound %d, optimum %d: should be tight", got, opt)
			}
		})
	}
}

// On random small clusters the bound is at least the best placement of every prefix.
func TestUpperBoundIsAtLeastTheOptimumOfEveryPrefix(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	models := []string{"T4", "P100", "G2"}
	shapes := []struct {
		gpus  int
		milli int64
	}{{0, 0}, {1, 300}, {1, 500}, {1, 700}, {1, 1000}, {2, 1000}, {4, 1000}}
	tight := 0
	for trial := range 150 {
		var nodes []placement.NodeSpec
		for i := range 1 + rng.IntN(3) {
			nodes = append(nodes, gpuNode(fmt.Sprint("n", i), models[rng.IntN(len(models))], 1+rng.IntN(4), int64(2+rng.IntN(8))*1000, int64(2+rng.IntN(8))*1024))
		}
		var pods []placement.Pod
		for range 2 + rng.IntN(5) {
			s := shapes[rng.IntN(len(shapes))]
			p := gpuPod(s.gpus, s.milli, int64(rng.IntN(5))*1000, int64(rng.IntN(5))*1024)
			if s.gpus > 0 && rng.IntN(3) == 0 {
				p.Models = []string{models[rng.IntN(len(models))]}
			}
			pods = append(pods, p)
		}
		ev := UpperBound(nodes, pods)
		for k := range pods {
			opt := optimum(nodes, pods[:k+1])
			if ev[k].Allocated < opt {
				t.Fatalf("trial %d, %d pods: bound %d below the optimum %d\nnodes %+v\npods %+v", trial, k+1, ev[k].Allocated, opt, nodes, pods[:k+1])
			}
			if ev[k].Allocated == opt {
				tight++
			}
			if k > 0 && ev[k].Allocated < ev[k-1].Allocated {
				t.Fatalf("trial %d: bound fell from %d to %d with one more pod", trial, ev[k-1].Allocated, ev[k].Allocated)
			}
		}
	}
	if tight == 0 {
		t.Error("the bound was never the optimum on any prefix")
	}
}

// On a real trace every policy's allocation stays at or under the bound after every arrival.
func TestEveryPolicyStaysUnderTheUpperBound(t *testing.T) {
	files := traces.AlibabaGPU2023()
	nodes, err := LoadNodesFrom(files, NodeListFile)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := LoadPodsFrom(files, PodListFile("gpuspec20"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWorkload(42, pods, nodes)
	if err != nil {
		t.Fatal(err)
	}
	bound := UpperBound(nodes, w.Arrivals)
	for _, name := range PolicyNames {
		w, _ := NewWorkload(42, pods, nodes)
		pol, err := NewPolicy(name, Setup{Typical: pods, Rand: w.Rand})
		if err != nil {
			t.Fatal(err)
		}
		res, err := Replay(nodes, w, pol, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, e := range res.Events {
			if e.Arrived != bound[k].Arrived || e.Allocated > bound[k].Allocated {
				t.Fatalf("%s, arrival %d: allocated %d of %d arrived; bound %d of %d arrived", name, k, e.Allocated, e.Arrived, bound[k].Allocated, bound[k].Arrived)
			}
		}
	}
}

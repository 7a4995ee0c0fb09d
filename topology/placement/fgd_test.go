package placement

import (
	"reflect"
	"testing"
)

func TestTypicalPods(t *testing.T) {
	var pods []Pod
	add := func(n int, p Pod) {
		for range n {
			pods = append(pods, p)
		}
	}
	add(50, Pod{CPU: 4000, GPUs: 1, GPUMilli: 500})
	add(30, Pod{CPU: 8000, GPUs: 1, GPUMilli: 1000})
	add(8, Pod{CPU: 2000})
	add(8, Pod{CPU: 1000}) // ties with the CPU 2000 pods: the larger shape goes first
	add(4, Pod{CPU: 1000, GPUs: 2, GPUMilli: 1000, Models: []string{"T4", "A10"}})

	got := TypicalPods(pods)
	var shapes []Shape
	var weights []float64
	for _, tp := range got {
		shapes = append(shapes, tp.Shape)
		weights = append(weights, tp.Weight)
	}
	// 50 + 30 + 8 = 88 % < 95 %; + 8 = 96 % ≥ 95 %: four shapes, the last one left out.
	want := []Shape{{CPU: 4000, GPUs: 1, GPUMilli: 500}, {CPU: 8000, GPUs: 1, GPUMilli: 1000}, {CPU: 2000}, {CPU: 1000}}
	if !reflect.DeepEqual(shapes, want) {
		t.Fatalf("shapes %v, want %v", shapes, want)
	}
	// Computed in float64 as the reference does, (count/total)/(covered/total), which
	// for 8 of 96 is one bit above 8/96.
	total, covered := 100.0, 96.0
	ref := func(c float64) float64 { return (c / total) / (covered / total) }
	if ref(8) == 8/covered {
		t.Fatalf("(8/100)/(96/100) == 8/96 in float64: the example no longer shows the difference")
	}
	if w := []float64{ref(50), ref(30), ref(8), ref(8)}; !reflect.DeepEqual(weights, w) {
		t.Fatalf("weights %v, want %v (renormalised over the prefix)", weights, w)
	}
}

func TestFragmentation(t *testing.T) {
	typical := []TypicalPod{
		{Shape: Shape{CPU: 1000, GPUs: 1, GPUMilli: 500}, Weight: 0.4},
		{Shape: Shape{CPU: 1000, GPUs: 1, GPUMilli: 1000}, Weight: 0.3},
		{Shape: Shape{CPU: 1000}, Weight: 0.2},
		{Shape: Shape{CPU: 1000, GPUs: 1, GPUMilli: 100, Models: "A10"}, ModelList: []string{"A10"}, Weight: 0.1},
	}
	cases := []struct {
		name    string
		cpuFree int64
		gpuFree []int64
		want    float64
	}{
		// 500: 300 on the GPU it cannot use; 1000: 300+600; CPU pod: all 1900; A10 pod: all 1900.
		{"each typical pod counts what it cannot use", 8000, []int64{1000, 300, 600}, 0.4*300 + 0.3*900 + 0.2*1900 + 0.1*1900},
		{"a pod that does not fit for CPU counts everything", 500, []int64{1000, 300, 600}, 1900},
		{"a node with nothing left has no fragmentation", 8000, []int64{0, 0}, 0},
		// Every case of the reference: CPU for none of the GPU pods (lack CPU / lack
		// both), the CPU pod lacking CPU, the A10 pod without access.
		{"a node short of CPU counts everything for every pod", 500, []int64{1000, 300}, 1300},
		{"lack both: neither GPUs nor CPU", 500, []int64{300, 300}, 600},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Fragmentation(typical, "T4", c.cpuFree, c.gpuFree); got < c.want-1e-9 || got > c.want+1e-9 {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestFGDChoosesTheGPUThatFragmentsLeast(t *testing.T) {
	typical := []TypicalPod{
		{Shape: Shape{GPUs: 1, GPUMilli: 500}, Weight: 0.5},
		{Shape: Shape{GPUs: 1, GPUMilli: 1000}, Weight: 0.5},
	}
	// Before: 0.5·0 + 0.5·600 = 300. On GPU 0: [500 600] → 0 + 0.5·1100 = 550, Δ = −250,
	// ⌊100σ(−0.25)⌋ = 43. On GPU 1: [1000 100] → 0.5·100 + 0.5·100 = 100, Δ = 200,
	// ⌊100σ(0.2)⌋ = 54.
	n := node("T4", 8000, 1000, 600)
	fgd := &FGD{typical: typical}
	if got, want := fgd.Score(n, share(0, 500)), (Choice{54, []int{1}}); !reflect.DeepEqual(got, want) {
		t.Fatalf("FGD: got %+v, want %+v", got, want)
	}
	// gpudra's policy scores what the allocator will do: first fit, GPU 0.
	g := &Gpudra{typical: typical}
	if got := g.Score(n, share(0, 500)); !reflect.DeepEqual(got.GPUs, []int{0}) {
		t.Fatalf("gpudra: got %+v, want GPU 0 (the allocator's first fit)", got)
	}
}

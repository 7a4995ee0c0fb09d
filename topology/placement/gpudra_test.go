package placement

import (
	"testing"
)

func TestStrandedFragmentation(t *testing.T) {
	shareT := TypicalPod{Shape: Shape{CPU: 4000, GPUs: 1, GPUMilli: 500}, Memory: 8192, Weight: 1}
	wholeT := TypicalPod{Shape: Shape{CPU: 4000, GPUs: 1, GPUMilli: 1000}, Memory: 8192, Weight: 1}
	noMemT := TypicalPod{Shape: Shape{CPU: 4000, GPUs: 1, GPUMilli: 500}, Weight: 1}
	a10T := TypicalPod{Shape: Shape{CPU: 4000, GPUs: 1, GPUMilli: 500, Models: "A10"}, ModelList: []string{"A10"}, Memory: 8192, Weight: 1}
	cpuT := TypicalPod{Shape: Shape{CPU: 4000}, Memory: 8192, Weight: 1}
	gpus := []int64{1000, 1000, 1000, 600} // L = 3600
	cases := []struct {
		name     string
		typical  TypicalPod
		cpu, mem int64
		want     int64
	}{
		{"a share with CPU for a copy on every fitting GPU strands nothing", shareT, 40000, 1 << 20, 0},
		{"CPU for two shares: the two fullest fitting GPUs are usable, the rest stranded", shareT, 8000, 1 << 20, 3600 - 2000},
		{"memory for two shares strands the same", shareT, 40000, 16384, 1600},
		{"less memory than the typical pod asks strands everything", shareT, 40000, 4096, 3600},
		{"a typical pod without memory leaves memory out", noMemT, 8000, 0, 1600},
		{"whole-GPU typical pods are not capped: FGD's measure (the 600 it cannot use)", wholeT, 8000, 1 << 20, 600},
		{"less CPU than one copy strands everything", shareT, 3000, 1 << 20, 3600},
		{"a typical pod that may not use the model strands everything", a10T, 40000, 1 << 20, 3600},
		{"a CPU-only typical pod uses no GPU", cpuT, 40000, 1 << 20, 3600},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := StrandedFragmentation([]TypicalPod{c.typical}, "T4", c.cpu, c.mem, gpus)
			if got != float64(c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestStrandedFragmentationSeesWhatFGDDoesNot(t *testing.T) {
	typical := []TypicalPod{{Shape: Shape{CPU: 4000, GPUs: 1, GPUMilli: 500}, Memory: 8192, Weight: 1}}
	gpus := []int64{1000, 1000, 500, 500}
	// CPU for two more shares, four GPUs they could use.
	if f := Fragmentation(typical, "T4", 8000, gpus); f != 0 {
		t.Fatalf("FGD: got %v, want 0 (one share fits)", f)
	}
	if f := StrandedFragmentation(typical, "T4", 8000, 1<<20, gpus); f != 1000 {
		t.Fatalf("gpudra: got %v, want 1000 (two GPUs with 500 left stranded)", f)
	}
}

func TestGpudraKeepsCPUNextToFreeGPUs(t *testing.T) {
	typical := []TypicalPod{{Shape: Shape{CPU: 4000, GPUs: 1, GPUMilli: 500}, Memory: 1024, Weight: 1}}
	g := &Gpudra{typical: typical}
	fgd := &FGD{typical: typical}
	withGPUs := node("T4", 8000, 1000, 1000) // CPU for two shares, two free GPUs
	full := node("T4", 8000, 0, 0)           // nothing left to strand
	p := cpuOnly(4000)
	// FGD: a share still fits either way, Δ = 0 on both nodes: a tie.
	if a, b := fgd.Score(withGPUs, p).Score, fgd.Score(full, p).Score; a != 50 || b != 50 {
		t.Fatalf("FGD: got %d and %d, want 50 and 50", a, b)
	}
	// gpudra: on the node with free GPUs the CPU pod leaves CPU for one share, stranding
	// a GPU (Δ = −1000, ⌊100σ(−1)⌋ = 26); on the full node nothing changes (50).
	if a, b := g.Score(withGPUs, p).Score, g.Score(full, p).Score; a != 26 || b != 50 {
		t.Fatalf("gpudra: got %d and %d, want 26 and 50", a, b)
	}
}

func TestGpudraScoresTheAllocatorsFirstFit(t *testing.T) {
	g := NewGpudra([]Pod{{CPU: 1000, Memory: 1024, GPUs: 1, GPUMilli: 500}})
	n := node("T4", 64000, 1000, 600, 300)
	cases := []struct {
		pod  *Pod
		want []int
	}{
		{share(1000, 500), []int{0}},
		{share(1000, 300), []int{0}},
		{share(1000, 700), []int{0}},
		{whole(1000, 1), []int{0}},
		{cpuOnly(1000), nil},
	}
	for _, c := range cases {
		if got := g.Score(n, c.pod).GPUs; !equalInts(got, c.want) {
			t.Errorf("%+v: GPUs %v, want %v", c.pod, got, c.want)
		}
	}
	n2 := node("T4", 64000, 200, 600, 1000)
	if got := g.Score(n2, share(1000, 500)).GPUs; !equalInts(got, []int{1}) {
		t.Errorf("first fit on [200 600 1000]: got %v, want [1]", got)
	}
}

func TestTypicalPodsMemoryIsTheShapesMean(t *testing.T) {
	pods := []Pod{
		{CPU: 1000, Memory: 1000, GPUs: 1, GPUMilli: 500},
		{CPU: 1000, Memory: 2001, GPUs: 1, GPUMilli: 500},
		{CPU: 2000, Memory: 4096},
	}
	got := map[Shape]int64{}
	for _, tp := range TypicalPods(pods) {
		got[tp.Shape] = tp.Memory
	}
	if m := got[Shape{CPU: 1000, GPUs: 1, GPUMilli: 500}]; m != 1500 {
		t.Errorf("share shape: memory %d, want 1500", m)
	}
	if m := got[Shape{CPU: 2000}]; m != 4096 {
		t.Errorf("CPU shape: memory %d, want 4096", m)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if a[k] != b[k] {
			return false
		}
	}
	return true
}

package sim

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/data/traces"
	"github.com/gpudra/gpudra/sim/reproduction"
	"github.com/gpudra/gpudra/topology/placement"
)

func TestClaimsAreWhatUsersWrite(t *testing.T) {
	cases := []struct {
		name string
		pod  placement.Pod
		pin  []int
		want string
	}{
		{"two whole GPUs of any model", placement.Pod{GPUs: 2, GPUMilli: 1000}, nil, `
devices:
  requests:
  - exactly:
      allocationMode: ExactCount
      count: 2
      deviceClassName: gpu.gpudra.dev
    name: gpu`},
		{"a share of a T4 or P100, pinned to GPU 3", placement.Pod{GPUs: 1, GPUMilli: 460, Models: []string{"T4", "P100"}}, []int{3}, `
devices:
  requests:
  - exactly:
      allocationMode: ExactCount
      capacity:
        requests:
          compute: "46"
          memory: 7065Mi
      count: 1
      deviceClassName: gpu-share.gpudra.dev
      selectors:
      - cel:
          expression: device.attributes["gpu.gpudra.dev"].productName in ["Tesla T4",
            "Tesla P100-PCIE-16GB"]
      - cel:
          expression: device.attributes["gpu.gpudra.dev"].index in [3]
    name: gpu`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			claim, err := Claim(&c.pod, c.pin, 1)
			if err != nil {
				t.Fatal(err)
			}
			got, err := yaml.Marshal(claim.Spec)
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(string(got)) != strings.TrimSpace(c.want) {
				t.Fatalf("got\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

func TestAllocatorBindsLikeTheMode(t *testing.T) {
	spec := placement.NodeSpec{Name: "openb-node-0000", CPU: 64000, Memory: 1 << 18, GPUs: 4, Model: "T4"}
	ctx := context.Background()
	cases := []struct {
		name string
		mode Mode
		pods []placement.Pod
		pins [][]int
		want [][]int
	}{
		{"reproduction: the pinned GPU, even when another fits first", Reproduction,
			[]placement.Pod{{GPUs: 1, GPUMilli: 300}, {GPUs: 1, GPUMilli: 500}},
			[][]int{{2}, {2}}, [][]int{{2}, {2}}},
		{"dra: the allocator's first fit", DRA,
			[]placement.Pod{{GPUs: 1, GPUMilli: 300}, {GPUs: 1, GPUMilli: 800}, {GPUs: 2, GPUMilli: 1000}},
			[][]int{{2}, {2}, {0, 1}}, [][]int{{0}, {1}, {2, 3}}},
		{"dra: whole GPUs skip GPUs with shares", DRA,
			[]placement.Pod{{GPUs: 1, GPUMilli: 100}, {GPUs: 1, GPUMilli: 1000}},
			[][]int{{0}, {1}}, [][]int{{0}, {1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := NewAllocator(ctx, []placement.NodeSpec{spec}, c.mode)
			if err != nil {
				t.Fatal(err)
			}
			n := placement.NewNode(spec, 0)
			for k := range c.pods {
				got, err := a.Bind(n, &c.pods[k], placement.Choice{GPUs: c.pins[k]})
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, c.want[k]) {
					t.Fatalf("pod %d got GPUs %v, want %v", k, got, c.want[k])
				}
			}
		})
	}
}

func TestAllocatorRefusesWhatDoesNotFit(t *testing.T) {
	spec := placement.NodeSpec{Name: "n", CPU: 64000, Memory: 1 << 18, GPUs: 2, Model: "T4"}
	a, err := NewAllocator(context.Background(), []placement.NodeSpec{spec}, Reproduction)
	if err != nil {
		t.Fatal(err)
	}
	n := placement.NewNode(spec, 0)
	if _, err := a.Bind(n, &placement.Pod{GPUs: 1, GPUMilli: 700}, placement.Choice{GPUs: []int{0}}); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]placement.Pod{
		"a share over 100 % compute":     {GPUs: 1, GPUMilli: 400},
		"a whole GPU that has a share":   {GPUs: 1, GPUMilli: 1000},
		"a model the node does not have": {GPUs: 1, GPUMilli: 100, Models: []string{"A10"}},
	} {
		if _, err := a.Bind(n, &p, placement.Choice{GPUs: []int{0}}); !errors.Is(err, reproduction.ErrRefused) {
			t.Errorf("%s: got %v, want ErrRefused", name, err)
		}
	}
}

// TestPolicyAgreesWithAllocator replays the start of the gpuspec20 trace (model
// constraints on 20 % of GPU pods) on the real cluster in both modes: the allocator
// must never refuse a node the policy's own accounting found feasible, and in
// reproduction mode must give exactly the pinned GPUs.
func TestPolicyAgreesWithAllocator(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 2000 pods four times")
	}
	files := traces.AlibabaGPU2023()
	nodes, err := reproduction.LoadNodesFrom(files, reproduction.NodeListFile)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := reproduction.LoadPodsFrom(files, reproduction.PodListFile("gpuspec20"))
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range Modes {
		for _, pol := range []string{placement.FGDName, reproduction.KubeName} {
			w, err := reproduction.NewWorkload(42, pods, nodes)
			if err != nil {
				t.Fatal(err)
			}
			w.Arrivals = w.Arrivals[:2000]
			p, _ := reproduction.NewPolicy(pol, reproduction.Setup{Typical: pods, Rand: w.Rand})
			a, err := NewAllocator(context.Background(), nodes, mode)
			if err != nil {
				t.Fatal(err)
			}
			res, err := reproduction.Replay(nodes, w, p, a)
			if err != nil {
				t.Fatal(err)
			}
			if res.Refused != 0 || res.Placed == 0 {
				t.Errorf("%s/%s: %d placed, allocator refused %d", mode, pol, res.Placed, res.Refused)
			}
			if mode == Reproduction && res.Moved != 0 {
				t.Errorf("%s/%s: %d pods got other GPUs than pinned", mode, pol, res.Moved)
			}
		}
	}
}

func TestReportsOfAClusterWithoutGPUs(t *testing.T) {
	nodes := []placement.NodeSpec{{Name: "openb-node-0000", CPU: 64000, Memory: 1 << 18}}
	pods := []placement.Pod{{Name: "a", CPU: 1000, GPUs: 1, GPUMilli: 500}, {Name: "b", CPU: 1000}}
	run, err := ReplayOne(context.Background(), nodes, pods, "none", NoAllocator, placement.FGDName, 42)
	if err != nil {
		t.Fatal(err)
	}
	rows := Summarize([]Run{run})
	var table, curves, md, svg strings.Builder
	if err := WriteTable(&table, rows); err != nil {
		t.Fatal(err)
	}
	if err := WriteCurves(&curves, []Run{run}, rows); err != nil {
		t.Fatal(err)
	}
	WriteMarkdown(&md, rows)
	if err := WriteSVG(&svg, "none", rows); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"table.csv": table.String(), "curves.csv": curves.String(), "table.md": md.String(), "svg": svg.String()} {
		if strings.Contains(out, "NaN") || strings.Contains(out, "Inf") {
			t.Errorf("%s shows NaN or Inf:\n%s", name, out)
		}
	}
	if !strings.Contains(md.String(), "| none | none | n/a |") {
		t.Errorf("table.md: want n/a for the policy's figure:\n%s", md.String())
	}
	if want := "none,none,FGD,1,,,,,,,0,0,"; !strings.Contains(table.String(), want) {
		t.Errorf("table.csv: want empty figures (%s):\n%s", want, table.String())
	}
}

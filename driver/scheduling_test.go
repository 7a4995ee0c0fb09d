package driver_test

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpudra/gpudra/driver"
)

// These tests allocate claims written as users write them with Kubernetes' real
// structured allocator over the slices a simulated node publishes.

var (
	quadLow  = []string{"gpu-0", "gpu-1", "gpu-2", "gpu-3"}
	quadHigh = []string{"gpu-4", "gpu-5", "gpu-6", "gpu-7"}
)

func TestV100FourFullyConnectedGPUs(t *testing.T) {
	forms := []struct {
		name  string
		claim string
		low   []string
		high  []string
	}{
		{"four whole GPUs with matchAttribute nvlinkClique", fourCliqueGPUs, quadLow, quadHigh},
		{"one 4-GPU NVLink group", fourGPUGroup, []string{"nvlink-0-1-2-3"}, []string{"nvlink-4-5-6-7"}},
	}
	for _, f := range forms {
		t.Run(f.name+"/gets a quad", func(t *testing.T) {
			_, rs := simNode(t, "dgx-v100", "v100")
			got := mustAllocate(t, newState(t, rs), "v100", f.claim)
			if !reflect.DeepEqual(got, f.low) && !reflect.DeepEqual(got, f.high) {
				t.Fatalf("got %v, want %v or %v", got, f.low, f.high)
			}
		})
		t.Run(f.name+"/with GPU 1 taken gets the upper quad", func(t *testing.T) {
			_, rs := simNode(t, "dgx-v100", "v100")
			st := newState(t, rs)
			mustAllocate(t, st, "v100", gpuByIndex(1))
			if got := mustAllocate(t, st, "v100", f.claim); !reflect.DeepEqual(got, f.high) {
				t.Fatalf("got %v, want %v", got, f.high)
			}
		})
		t.Run(f.name+"/with GPUs 1 and 5 taken is unsatisfiable", func(t *testing.T) {
			_, rs := simNode(t, "dgx-v100", "v100")
			st := newState(t, rs)
			mustAllocate(t, st, "v100", gpuByIndex(1))
			mustAllocate(t, st, "v100", gpuByIndex(5))
			mustNotFit(t, st, "v100", "no quad is whole", f.claim)
		})
	}
}

func TestV100DoubleLinkPairsOnly(t *testing.T) {
	inv, rs := simNode(t, "dgx-v100", "v100")
	st := newState(t, rs)
	used := map[int]bool{}
	pairs := 0
	for {
		got := allocate(t, st, "v100", doubleLinkPair)
		if got == nil {
			break
		}
		members := groupMembers(t, got)
		if len(members) != 2 {
			t.Fatalf("got %v, want one pair", got)
		}
		a, b := members[0], members[1]
		if links := inv.NVLink.Links[a][b]; links != 2 {
			t.Fatalf("allocated pair %d-%d has %d NVLinks, want 2", a, b, links)
		}
		if used[a] || used[b] {
			t.Fatalf("pair %d-%d reuses a GPU already in another pair", a, b)
		}
		used[a], used[b] = true, true
		pairs++
	}
	if pairs < 3 {
		t.Fatalf("only %d double-link pairs were allocated; a DGX-1 has 4 disjoint ones", pairs)
	}
}

func groupMembers(t *testing.T, devices []string) []int {
	t.Helper()
	if len(devices) != 1 || !strings.HasPrefix(devices[0], "nvlink-") {
		t.Fatalf("want one nvlink group device, got %v", devices)
	}
	var out []int
	for _, s := range strings.Split(strings.TrimPrefix(devices[0], "nvlink-"), "-") {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

func TestNVSwitchBoards(t *testing.T) {
	for _, profile := range []string{"dgx-h100", "dgx-a100"} {
		t.Run(profile+"/all eight GPUs are one NVLink clique", func(t *testing.T) {
			_, rs := simNode(t, profile, "n")
			got := mustAllocate(t, newState(t, rs), "n", strings.Replace(fourCliqueGPUs, "count: 4", "count: 8", 1))
			if len(got) != 8 {
				t.Fatalf("got %v", got)
			}
		})
		t.Run(profile+"/any four free GPUs satisfy a 4-GPU NVLink request", func(t *testing.T) {
			_, rs := simNode(t, profile, "n")
			st := newState(t, rs)
			mustAllocate(t, st, "n", gpuByIndex(1))
			mustAllocate(t, st, "n", gpuByIndex(5))
			got := mustAllocate(t, st, "n", fourCliqueGPUs)
			if slices.Contains(got, "gpu-1") || slices.Contains(got, "gpu-5") || len(got) != 4 {
				t.Fatalf("got %v", got)
			}
			// Only two GPUs remain: a second 4-GPU request must not fit.
			mustNotFit(t, st, "n", "two GPUs left", fourCliqueGPUs)
		})
		t.Run(profile+"/the whole board is one group", func(t *testing.T) {
			_, rs := simNode(t, profile, "n")
			got := mustAllocate(t, newState(t, rs), "n", strings.Replace(fourGPUGroup, "== 4", "== 8", 1))
			if !reflect.DeepEqual(got, []string{"nvlink-0-1-2-3-4-5-6-7"}) {
				t.Fatalf("got %v", got)
			}
		})
	}
}

func TestPCIeOnlyNode(t *testing.T) {
	inv, rs := simNode(t, "l40s-pcie", "l40s")
	st := newState(t, rs)
	mustNotFit(t, st, "l40s", "no NVLink group exists", fourGPUGroup)
	mustNotFit(t, st, "l40s", "no NVLink group exists", doubleLinkPair)
	mustNotFit(t, st, "l40s", "no GPU has an nvlinkClique", strings.Replace(fourCliqueGPUs, "count: 4", "count: 2", 1))
	got := mustAllocate(t, st, "l40s", `
devices:
  requests:
  - name: gpus
    exactly:
      deviceClassName: gpu.gpudra.dev
      count: 2
  constraints:
  - matchAttribute: resource.kubernetes.io/pcieRoot
`)
	a, b := deviceIndex(t, got[0]), deviceIndex(t, got[1])
	if inv.GPUs[a].PCIeRoot != inv.GPUs[b].PCIeRoot || inv.GPUs[a].PCIeRoot == "" {
		t.Fatalf("GPUs %d and %d are on roots %q and %q", a, b, inv.GPUs[a].PCIeRoot, inv.GPUs[b].PCIeRoot)
	}
	// Four GPUs per root: a 5-GPU same-root request cannot fit.
	mustNotFit(t, newState(t, rs), "l40s", "roots hold four GPUs", `
devices:
  requests:
  - name: gpus
    exactly:
      deviceClassName: gpu.gpudra.dev
      count: 5
  constraints:
  - matchAttribute: resource.kubernetes.io/pcieRoot
`)
}

func deviceIndex(t *testing.T, name string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimPrefix(name, "gpu-"))
	if err != nil {
		t.Fatalf("device %q is not a whole GPU", name)
	}
	return n
}

func TestMIGOnH100(t *testing.T) {
	_, rs := simNode(t, "dgx-h100", "h100")
	st := newState(t, rs)
	small := mustAllocate(t, st, "h100", migOn(0, "1g.10gb"))
	large := mustAllocate(t, st, "h100", migOn(0, "3g.40gb"))
	if !strings.HasPrefix(small[0], "gpu-0-mig-1g10gb-") || !strings.HasPrefix(large[0], "gpu-0-mig-3g40gb-") {
		t.Fatalf("got %v and %v, want MIG devices of GPU 0", small, large)
	}
	mustNotFit(t, st, "h100", "GPU 0 holds MIG instances", gpuByIndex(0))
	mustNotFit(t, st, "h100", "GPU 0 holds MIG instances", shareOn(0, "1Gi", "0"))

	// GPU 1: all seven 1g slices fit, an eighth does not.
	for k := range 7 {
		if got := allocate(t, st, "h100", migOn(1, "1g.10gb")); got == nil {
			t.Fatalf("1g.10gb slice %d of 7 did not fit", k+1)
		}
	}
	mustNotFit(t, st, "h100", "all seven 1g slices are taken", migOn(1, "1g.10gb"))
	mustNotFit(t, st, "h100", "GPU 1 is fully partitioned", migOn(1, "2g.20gb"))
}

func TestMIGBlockedByWholeGPU(t *testing.T) {
	_, rs := simNode(t, "dgx-a100", "a100")
	st := newState(t, rs)
	mustAllocate(t, st, "a100", gpuByIndex(2))
	mustNotFit(t, st, "a100", "GPU 2 is allocated whole", migOn(2, "1g.5gb"))
	mustAllocate(t, st, "a100", migOn(3, "1g.5gb"))
}

func TestShares(t *testing.T) {
	t.Run("four 10Gi + 25% shares fit on one GPU, a fifth does not", func(t *testing.T) {
		_, rs := simNode(t, "dgx-h100", "h100")
		st := newState(t, rs)
		for k := range 4 {
			got := allocate(t, st, "h100", shareOn(0, "10Gi", "25"))
			if !reflect.DeepEqual(got, []string{"gpu-0-share"}) {
				t.Fatalf("share %d: got %v", k+1, got)
			}
		}
		mustNotFit(t, st, "h100", "compute is fully booked", shareOn(0, "10Gi", "1"))
		mustAllocate(t, st, "h100", shareOn(0, "10Gi", "0"))
	})
	t.Run("memory beyond what is left is refused", func(t *testing.T) {
		_, rs := simNode(t, "dgx-v100", "v100") // 32 GiB GPUs
		st := newState(t, rs)
		for range 3 {
			mustAllocate(t, st, "v100", shareOn(0, "10Gi", "10"))
		}
		mustNotFit(t, st, "v100", "2Gi left", shareOn(0, "3Gi", "10"))
		mustAllocate(t, st, "v100", shareOn(0, "2Gi", "10"))
	})
	t.Run("an exclusive claim is refused on a GPU with shares", func(t *testing.T) {
		_, rs := simNode(t, "dgx-v100", "v100")
		st := newState(t, rs)
		mustAllocate(t, st, "v100", shareOn(3, "1Gi", "10"))
		mustNotFit(t, st, "v100", "GPU 3 has a share", gpuByIndex(3))
	})
	t.Run("a share is refused on a GPU allocated whole", func(t *testing.T) {
		_, rs := simNode(t, "dgx-v100", "v100")
		st := newState(t, rs)
		mustAllocate(t, st, "v100", gpuByIndex(3))
		mustNotFit(t, st, "v100", "GPU 3 is exclusive", shareOn(3, "1Gi", "10"))
	})
}

func TestGroupsAndMembersExcludeEachOther(t *testing.T) {
	t.Run("a group blocks its members", func(t *testing.T) {
		_, rs := simNode(t, "dgx-v100", "v100")
		st := newState(t, rs)
		if got := mustAllocate(t, st, "v100", fourGPUGroup); len(groupMembers(t, got)) != 4 {
			t.Fatal(got)
		}
		// Whichever quad it took, its GPUs are gone: four whole GPUs remain.
		for range 4 {
			mustAllocate(t, st, "v100", wholeGPU)
		}
		mustNotFit(t, st, "v100", "the group holds the other four", wholeGPU)
	})
	t.Run("a member blocks its groups", func(t *testing.T) {
		_, rs := simNode(t, "dgx-h100", "h100")
		st := newState(t, rs)
		mustAllocate(t, st, "h100", shareOn(0, "1Gi", "0"))
		mustAllocate(t, st, "h100", migOn(4, "1g.10gb"))
		mustNotFit(t, st, "h100", "GPUs 0 and 4 are in use", strings.Replace(fourGPUGroup, "== 4", "== 8", 1))
		mustNotFit(t, st, "h100", "both quads have a busy GPU", fourGPUGroup)
		got := mustAllocate(t, st, "h100", strings.Replace(fourGPUGroup, "== 4", "== 2", 1))
		if m := groupMembers(t, got); slices.Contains(m, 0) || slices.Contains(m, 4) {
			t.Fatalf("pair %v contains a busy GPU", m)
		}
	})
}

func TestCELSelectors(t *testing.T) {
	_, v100 := simNode(t, "dgx-v100", "v100")
	_, h100 := simNode(t, "dgx-h100", "h100")
	_, l40s := simNode(t, "l40s-pcie", "l40s")
	tests := []struct {
		name     string
		expr     string
		fitsOn   []string
		refusing []string
	}{
		{"product name", `device.attributes["gpu.gpudra.dev"].productName == "NVIDIA L40S"`, []string{"l40s"}, []string{"v100", "h100"}},
		{"memory at least 40Gi", `device.capacity["gpu.gpudra.dev"].memory.compareTo(quantity("40Gi")) >= 0`, []string{"h100", "l40s"}, []string{"v100"}},
		{"compute capability 8.0 or newer", `device.attributes["gpu.gpudra.dev"].cudaComputeCapability.isGreaterThan(semver("7.9.9"))`, []string{"h100", "l40s"}, []string{"v100"}},
		{"Hopper", `device.attributes["gpu.gpudra.dev"].architecture == "Hopper"`, []string{"h100"}, []string{"v100", "l40s"}},
		{"driver 550 or newer", `device.attributes["gpu.gpudra.dev"].driverVersion.compareTo(semver("550.0.0")) >= 0`, []string{"h100", "l40s"}, []string{"v100"}},
		{"CUDA 12.4 or newer", `device.attributes["gpu.gpudra.dev"].cudaDriverVersion.compareTo(semver("12.4.0")) >= 0`, []string{"h100", "l40s"}, []string{"v100"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			claimYAML := `
devices:
  requests:
  - name: gpu
    exactly:
      deviceClassName: gpu.gpudra.dev
      selectors:
      - cel:
          expression: '` + tc.expr + `'
`
			st := newState(t, v100, h100, l40s)
			for _, n := range tc.fitsOn {
				mustAllocate(t, st, n, claimYAML)
			}
			for _, n := range tc.refusing {
				mustNotFit(t, st, n, "selector excludes "+n, claimYAML)
			}
		})
	}
}

func TestSemver(t *testing.T) {
	for in, want := range map[string]string{"535.161.08": "535.161.8", "12.4": "12.4.0", "9.0": "9.0.0", "550.54.15": "550.54.15", "abc": "", "1.2.3.4": ""} {
		if got := driver.Semver(in); got != want {
			t.Errorf("Semver(%q) = %q, want %q", in, got, want)
		}
	}
}

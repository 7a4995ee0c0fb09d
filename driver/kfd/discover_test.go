package kfd_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/kfd"
	"github.com/gpudra/gpudra/driver/kfdsim"
)

// testdata/mi300-cpx-capture holds a CPU node and one GPU node whose properties carry the
// values a gfx942 (MI300-series, PCI device 0x74a0) node printed in one of its
// partitioned modes (num_xcc 1, 76 CUs): bus 0x75 packed in location_id, render node 128,
// a 64-bit hive id and unique id. The DRM card's numa_node and partition files are added.
func TestCapturedNodeReadsAsTheKernelPrintedIt(t *testing.T) {
	res, err := kfd.Discover(os.DirFS("testdata/mi300-cpx-capture"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Unreadable) != 0 || len(res.GPUs) != 1 {
		t.Fatalf("got %d GPUs, unreadable %+v; want the one GPU node (the CPU node skipped)", len(res.GPUs), res.Unreadable)
	}
	g := res.GPUs[0]
	checks := []struct{ name, got, want string }{
		{"vendor", g.Vendor, driver.VendorAMD},
		{"PCI bus id", g.PCIBusID, "0000:75:00.0"},
		{"gfx target", g.KFD.GFXTarget, "gfx942"},
		{"UUID", g.UUID, "GPU-0000090000000000"},
		{"XGMI hive", g.KFD.XGMIHive, "a18563f2c17dd800"},
		{"compute partition", g.KFD.ComputePartition, "CPX"},
		{"memory partition", g.KFD.MemoryPartition, "NPS1"},
		{"product", g.ProductName, "AMD Instinct MI300A"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	if g.KFD.RenderMinor != 128 || g.KFD.Card != 0 || g.KFD.Node != 1 || g.KFD.GPUID != 52345 {
		t.Errorf("render %d card %d node %d gpu_id %d, want 128, 0, 1, 52345", g.KFD.RenderMinor, g.KFD.Card, g.KFD.Node, g.KFD.GPUID)
	}
	if g.MemoryBytes != 206142726144 || g.Multiprocessors != 76 {
		t.Errorf("memory %d, CUs %d; want local_mem_size 206142726144 and 304 SIMDs / 4 = 76", g.MemoryBytes, g.Multiprocessors)
	}
	if g.NUMANode == nil || *g.NUMANode != 1 {
		t.Errorf("NUMA node %v, want the card's 1", g.NUMANode)
	}
}

func TestSimulatedNodes(t *testing.T) {
	cases := []struct {
		profile    string
		gpus       int
		memoryGiB  uint64
		vendor     string
		gfx        string
		xgmiPeers  int
		partitions int
	}{
		{"mi300x-8", 8, 192, driver.VendorAMD, "gfx942", 7, 1},
		{"mi250x-4", 8, 64, driver.VendorAMD, "gfx90a", 7, 1},
		{"hygon-dcu-8", 8, 32, driver.VendorHygon, "gfx906", 0, 1},
		{"mi300x-cpx", 8, 192, driver.VendorAMD, "gfx942", 0, 8},
		{"mixed-l40s-mi210", 1, 64, driver.VendorAMD, "gfx90a", 0, 1},
	}
	for _, tc := range cases {
		t.Run(tc.profile, func(t *testing.T) {
			p, err := kfdsim.Load(tc.profile)
			if err != nil {
				t.Fatal(err)
			}
			res, err := kfd.Discover(p.Tree("node-a"))
			if err != nil {
				t.Fatal(err)
			}
			if len(res.GPUs) != tc.gpus || len(res.Unreadable) != 0 {
				t.Fatalf("%d GPUs (unreadable %v), want %d", len(res.GPUs), res.Unreadable, tc.gpus)
			}
			hives, uuids, buses := map[string]bool{}, map[string]bool{}, map[string]bool{}
			for k, g := range res.GPUs {
				if g.Index != k || g.Vendor != tc.vendor || g.KFD.GFXTarget != tc.gfx || g.MemoryBytes != tc.memoryGiB<<30 {
					t.Errorf("GPU %d: index %d vendor %s gfx %s memory %d", k, g.Index, g.Vendor, g.KFD.GFXTarget, g.MemoryBytes)
				}
				if len(g.KFD.XGMIPeers) != tc.xgmiPeers || g.KFD.Partitions != tc.partitions || g.PCIeRoot == "" || g.NUMANode == nil {
					t.Errorf("GPU %d: %d XGMI peers, %d partitions, PCIe root %q, NUMA %v", k, len(g.KFD.XGMIPeers), g.KFD.Partitions, g.PCIeRoot, g.NUMANode)
				}
				hives[g.KFD.XGMIHive] = true
				uuids[g.UUID] = true
				buses[g.PCIBusID] = true
			}
			if len(hives) != 1 {
				t.Errorf("hives %v: want one (all in one hive, or none)", hives)
			}
			if len(uuids) != tc.gpus {
				t.Errorf("%d distinct UUIDs for %d GPUs", len(uuids), tc.gpus)
			}
			if len(buses) != tc.gpus/tc.partitions {
				t.Errorf("%d PCI functions, want %d (partitions of one GPU share theirs)", len(buses), tc.gpus/tc.partitions)
			}
		})
	}
}

// A node whose files make no sense is left out, with the file and the value at fault; the
// node's other GPUs are still found.
func TestBadNodesAreUnreadableNamingFileAndValue(t *testing.T) {
	const props = "class/kfd/kfd/topology/nodes/3/properties"
	cases := []struct {
		name      string
		edit      func(string) string
		wantParts []string
	}{
		{"unknown vendor", func(s string) string { return strings.Replace(s, "vendor_id 4098", "vendor_id 4318", 1) },
			[]string{props, "vendor_id 4318", "4098 (AMD)", "7572 (Hygon)"}},
		{"value not a number", func(s string) string { return strings.Replace(s, "simd_per_cu 4", "simd_per_cu four", 1) },
			[]string{props, "simd_per_cu", `"four"`}},
		{"render minor out of range", func(s string) string { return strings.Replace(s, "drm_render_minor 129", "drm_render_minor 3", 1) },
			[]string{props, "drm_render_minor 3", "128 to 255"}},
		{"no render minor", func(s string) string { return strings.Replace(s, "drm_render_minor 129", "", 1) },
			[]string{props, "no drm_render_minor"}},
		{"gfx version that names no ISA", func(s string) string {
			return strings.Replace(s, "gfx_target_version 90402", "gfx_target_version 91702", 1)
		}, []string{props, "gfx_target_version 91702"}},
		{"a line without a value", func(s string) string { return s + "hive_id\n" },
			[]string{props, `"hive_id"`, "<key> <value>"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := kfdsim.Load("mi300x-8")
			if err != nil {
				t.Fatal(err)
			}
			tree := p.Tree("node-a")
			tree[props] = &fstest.MapFile{Data: []byte(tc.edit(string(tree[props].Data))), Mode: 0o444}
			res, err := kfd.Discover(tree)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.GPUs) != 7 || len(res.Unreadable) != 1 {
				t.Fatalf("%d GPUs, unreadable %v: want 7 and node 3", len(res.GPUs), res.Unreadable)
			}
			for _, w := range tc.wantParts {
				if !strings.Contains(res.Unreadable[0].Reason, w) {
					t.Errorf("reason %q does not mention %q", res.Unreadable[0].Reason, w)
				}
			}
		})
	}
}

func TestTreeWithoutKFDIsAnError(t *testing.T) {
	_, err := kfd.Discover(fstest.MapFS{"class/drm/card0/dev": {Data: []byte("226:0\n")}})
	if !errors.Is(err, kfd.ErrNoTopology) || !strings.Contains(err.Error(), kfd.TopologyNodes) {
		t.Fatalf("error %v: want ErrNoTopology naming %s", err, kfd.TopologyNodes)
	}
}

func TestGFXTargetNames(t *testing.T) {
	for version, want := range map[uint64]string{90402: "gfx942", 90010: "gfx90a", 90006: "gfx906", 110501: "gfx1151", 0: ""} {
		if got, _ := kfd.GFXTarget(version); got != want {
			t.Errorf("GFXTarget(%d) = %q, want %q", version, got, want)
		}
	}
}

// FuzzDiscover: whatever a GPU node's properties say, discovery returns (a GPU or an
// unreadable node) and never panics.
func FuzzDiscover(f *testing.F) {
	p, err := kfdsim.Load("mi250x-4")
	if err != nil {
		f.Fatal(err)
	}
	const props = "class/kfd/kfd/topology/nodes/2/properties"
	base := p.Tree("fuzz")
	f.Add(base[props].Data)
	f.Add([]byte("simd_count 4\nvendor_id 7572\nlocation_id 18446744073709551615\n"))
	f.Add([]byte("simd_count 1\nsimd_per_cu 0\ngfx_target_version 99999999\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tree := fstest.MapFS{}
		for k, v := range base {
			tree[k] = v
		}
		tree[props] = &fstest.MapFile{Data: data, Mode: 0o444}
		res, err := kfd.Discover(tree)
		if err != nil {
			t.Fatalf("a bad node failed the whole discovery: %v", err)
		}
		if len(res.GPUs)+len(res.Unreadable) < 7 {
			t.Fatalf("%d GPUs and %d unreadable: the other nodes went missing", len(res.GPUs), len(res.Unreadable))
		}
	})
}

// A GPU whose KFD node goes away or changes gpu_id fails Check; the others pass.
func TestCheckNoticesAGPUThatWentAway(t *testing.T) {
	p, err := kfdsim.Load("mi300x-8")
	if err != nil {
		t.Fatal(err)
	}
	tree := p.Tree("node-a")
	res, err := kfd.Discover(tree)
	if err != nil {
		t.Fatal(err)
	}
	for k := range res.GPUs {
		if err := kfd.Check(tree, &res.GPUs[k]); err != nil {
			t.Fatalf("GPU %d: %v", k, err)
		}
	}
	gone, replaced := &res.GPUs[2], &res.GPUs[5]
	delete(tree, fmt.Sprintf("%s/%d/properties", kfd.TopologyNodes, gone.KFD.Node))
	tree[fmt.Sprintf("%s/%d/gpu_id", kfd.TopologyNodes, replaced.KFD.Node)] = &fstest.MapFile{Data: []byte("7\n")}
	if err := kfd.Check(tree, gone); err == nil || !strings.Contains(err.Error(), "properties") {
		t.Errorf("a GPU whose node is gone: %v", err)
	}
	if err := kfd.Check(tree, replaced); err == nil || !strings.Contains(err.Error(), "gpu_id is 7") {
		t.Errorf("a GPU whose gpu_id changed: %v", err)
	}
	if err := kfd.Check(tree, &res.GPUs[0]); err != nil {
		t.Errorf("a GPU that is still there: %v", err)
	}
}

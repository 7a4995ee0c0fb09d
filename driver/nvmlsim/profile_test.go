package nvmlsim

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"sigs.k8s.io/yaml"
)

// v100 is a valid two-GPU profile the error cases below break one field at a time.
const v100 = `
name: dgx-v100
count: 2
driver: {version: 535.161.08, cudaVersion: "12.2"}
gpu:
  name: Tesla V100-SXM2-32GB
  brand: tesla
  architecture: volta
  computeCapability: "7.0"
  memoryMiB: 32768
  multiprocessors: 80
  pciDeviceId: 0x1DB510DE
pcie:
  roots:
  - name: pci0000:00
    numaNode: 0
    switches: [[0, 1]]
nvlink:
  matrix: |
    X 6
    6 X
`

func TestParseAcceptsAValidProfile(t *testing.T) {
	p, err := Parse([]byte(v100), "dgx-v100.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p.node.nvlink.linksPerGPU != 6 || p.node.cudaVersion != 12020 || p.node.nvmlVersion != "12.535.161.08" {
		t.Errorf("resolved links %d, CUDA %d, NVML %q", p.node.nvlink.linksPerGPU, p.node.cudaVersion, p.node.nvmlVersion)
	}
}

func TestParseReportsTheFieldPath(t *testing.T) {
	tests := []struct {
		name string
		old  string // text of v100 to replace
		new  string
		want string
	}{
		{"bad link count names the cell", "X 6\n    6 X", "X x\n    x X", `dgx-v100.yaml: nvlink.matrix[0][1]: link count must be an integer 0..36 or "-", got "x"`},
		{"unknown architecture lists the accepted ones", "volta", "voltaa", `dgx-v100.yaml: gpu.architecture: "voltaa" is not one of volta, turing, ampere, ada, hopper, blackwell`},
		{"unknown field lists the accepted ones", "  memoryMiB: 32768", "  memoryMB: 32768", `dgx-v100.yaml: gpu.memoryMB: unknown field; accepted fields are name, brand, architecture, computeCapability, memoryMiB, multiprocessors, pciDeviceId, mig, migEnabled`},
		{"unknown field in a list item has its index", "    numaNode: 0", "    numaNode: 0\n    numa: 1", `dgx-v100.yaml: pcie.roots[0].numa: unknown field`},
		{"asymmetric matrix", "X 6\n    6 X", "X 6\n    4 X", `nvlink.matrix[1][0]: the matrix must be symmetric: GPU 0→1 has 6 links but 1→0 has 4`},
		{"matrix not square", "X 6\n    6 X", "X 6 1\n    6 X", `nvlink.matrix[0]: must have one cell per GPU (2), got 3`},
		{"matrix rows != count", "X 6\n    6 X", "X 6", `nvlink.matrix: must have one row per GPU (2), got 1 rows`},
		{"diagonal must be X", "X 6\n    6 X", "0 6\n    6 X", `nvlink.matrix[0][0]: the diagonal must be X, got "0"`},
		{"links over linksPerGPU", "nvlink:\n", "nvlink:\n  linksPerGPU: 4\n", `nvlink.matrix[0]: GPU 0 has 6 links but linksPerGPU is 4`},
		{"too many links per GPU", "nvlink:\n", "nvlink:\n  linksPerGPU: 40\n", `nvlink.linksPerGPU: must be 1..36`},
		{"GPU in two roots", "switches: [[0, 1]]", "switches: [[0, 1]]\n    gpus: [1]", `pcie.roots[0].switches[0][1]: GPU 1 is already in pcie.roots[0].gpus[0]`},
		{"GPU in no root", "switches: [[0, 1]]", "gpus: [0]", `pcie.roots: GPU 1 is in no root`},
		{"GPU that does not exist", "switches: [[0, 1]]", "switches: [[0, 1, 2]]", `pcie.roots[0].switches[0][2]: GPU 2 does not exist; GPUs are 0..1`},
		{"root name format", "pci0000:00", "pci0:00", `pcie.roots[0].name: must be a root complex name "pci<domain>:<bus>"`},
		{"missing NUMA node", "    numaNode: 0\n", "", `pcie.roots[0].numaNode: required, 0..1023`},
		{"wrong kind", "count: 2", "count: two", `count: must be an integer, got "two"`},
		{"compute capability format", `"7.0"`, `"seven"`, `gpu.computeCapability: must be "<major>.<minor>"`},
		{"unknown brand", "brand: tesla", "brand: teslaa", `gpu.brand: "teslaa" is not one of geforce, geforce-rtx, grid, nvidia`},
		{"unknown MIG table", "  pciDeviceId: 0x1DB510DE", "  pciDeviceId: 0x1DB510DE\n  mig: V100", `gpu.mig: "V100" is not "none" or one of A100_PCIE_40GB`},
		{"migEnabled without MIG tables", "  pciDeviceId: 0x1DB510DE", "  pciDeviceId: 0x1DB510DE\n  migEnabled: true", `gpu.migEnabled: the GPU has no MIG tables`},
		{"missing GPU fields", "  multiprocessors: 80\n", "", `gpu.multiprocessors: required (no base or model provides it)`},
		{"both matrix and nvswitch", "nvlink:\n", "nvlink:\n  nvswitch: {count: 2}\n", `nvlink: set either matrix (point-to-point links) or nvswitch`},
		{"unknown base", "name: dgx-v100", "name: dgx-v100\nbase: dgx1", `base: "dgx1" is not one of dgxa100, dgxb200, dgxh100, dgxh200`},
		{"duplicate key", "count: 2", "count: 2\ncount: 3", `not valid YAML`},
		{"overlapping roots", "    switches: [[0, 1]]", "    switches: [[0]]\n  - name: pci0000:02\n    numaNode: 0\n    gpus: [1]", `pcie.roots[1].name: its buses 0x02..0x03 overlap those of pci0000:00 (0x00..0x03)`},
		{"driver version", "version: 535.161.08", "version: latest", `driver.version: must be a driver version such as 550.90.07, got "latest"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := strings.Replace(v100, tc.old, tc.new, 1)
			if doc == v100 {
				t.Fatalf("test case does not change the profile: %q not found", tc.old)
			}
			_, err := Parse([]byte(doc), "dgx-v100.yaml")
			if err == nil {
				t.Fatalf("Parse accepted:\n%s", doc)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error:\n%v\nwant it to contain:\n%s", err, tc.want)
			}
		})
	}
}

func TestParseAcceptsAllMatrixSpellings(t *testing.T) {
	for name, matrix := range map[string]string{
		"block string":  "|\n    X 6\n    6 X",
		"list of rows":  `["X 6", "6 X"]`,
		"list of lists": `[[X, 6], [6, X]]`,
		"dash for none": "|\n    X -\n    - X",
	} {
		t.Run(name, func(t *testing.T) {
			doc := strings.Replace(v100, "|\n    X 6\n    6 X", matrix, 1)
			if _, err := Parse([]byte(doc), "m.yaml"); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestBuiltinsAndExampleParse(t *testing.T) {
	if got, want := BuiltinNames(), []string{"dgx-a100", "dgx-h100", "dgx-v100", "hgx-a100-4gpu", "hgx-h100-4gpu", "l40s-1", "l40s-pcie"}; !slices.Equal(got, want) {
		t.Errorf("BuiltinNames() = %v, want %v", got, want)
	}
	for _, name := range BuiltinNames() {
		if _, err := Builtin(name); err != nil {
			t.Errorf("built-in %s: %v", name, err)
		}
	}
	p, err := LoadFile("example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv, _, err := p.NewServer("n")
	if err != nil {
		t.Fatal(err)
	}
	if views := walk(t, srv); len(views) != 4 || len(views[0].links) != 12 || views[0].migProfiles == 0 {
		t.Errorf("example: %d GPUs, %d links on GPU 0, %d MIG profiles", len(views), len(views[0].links), views[0].migProfiles)
	}
}

func TestOpenTakesABuiltinNameOrAFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "node.yaml")
	if err := os.WriteFile(file, []byte(v100), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, spec, wantErr string
	}{
		{"built-in name", "l40s-pcie", ""},
		{"profile file", file, ""},
		{"unknown built-in lists the built-ins", "dgx-v200", "built-in profiles are dgx-a100, dgx-h100, dgx-v100, hgx-a100-4gpu, hgx-h100-4gpu, l40s-1, l40s-pcie"},
		{"missing file", filepath.Join(dir, "none.yaml"), "no such file"},
		{"path traversal is not a built-in", "../profiles/dgx-v100", "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Open(tc.spec, "n")
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Open(%q) error = %v, want %q", tc.spec, err, tc.wantErr)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(v100))
	for _, name := range BuiltinNames() {
		data, _ := builtinFS.ReadFile("profiles/" + name + ".yaml")
		f.Add(data)
	}
	f.Add([]byte("nvlink: {matrix: [[X, -1], [1e99, X]]}\ncount: 2"))
	f.Add([]byte("pcie: {roots: [{name: pci0000:ff, numaNode: 0, switches: [[0, 0], []]}]}\ncount: 3"))
	f.Add([]byte("- a\n- b"))
	f.Add([]byte(v100 + "---\n"))
	f.Add([]byte(v100 + "---\nname: second\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data, "fuzz.yaml")
		if err != nil {
			return
		}
		out, err := yaml.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		again, err := Parse(out, "again.yaml")
		if err != nil {
			t.Fatalf("written back:\n%s\ndoes not parse: %v", out, err)
		}
		if !reflect.DeepEqual(again.node, p.node) {
			t.Fatalf("written back:\n%s\nresolves to %+v, want %+v", out, again.node, p.node)
		}
		srv, _, err := p.NewServer("seed")
		if err != nil {
			t.Fatalf("a parsed profile must build: %v", err)
		}
		count, _ := srv.DeviceGetCount()
		for i := range count {
			d, _ := srv.DeviceGetHandleByIndex(i)
			for l := range 3 {
				d.GetNvLinkRemotePciInfo(l)
			}
			other, _ := srv.DeviceGetHandleByIndex(0)
			d.GetTopologyCommonAncestor(other)
		}
	})
}

// nvswitchBoard is an NVSwitch profile of count H100s, four per PCIe root.
func nvswitchBoard(count int) string {
	var roots strings.Builder
	for r := range (count + 3) / 4 {
		fmt.Fprintf(&roots, "  - name: pci%04x:00\n    numaNode: %d\n    switches: [", r, r%2)
		for g := 4 * r; g < min(count, 4*r+4); g++ {
			if g > 4*r {
				roots.WriteString(", ")
			}
			fmt.Fprintf(&roots, "[%d]", g)
		}
		roots.WriteString("]\n")
	}
	return fmt.Sprintf("name: board\nmodel: H100_SXM5_80GB\ncount: %d\ndriver: {version: 550.90.07, cudaVersion: \"12.4\"}\ngpu: {multiprocessors: 132}\npcie:\n  roots:\n%snvlink:\n  linksPerGPU: 18\n  nvswitch: {count: 4}\n", count, roots.String())
}

func TestNVSwitchBoardSizes(t *testing.T) {
	tests := []struct {
		count   int
		wantErr string
	}{
		{count: 24},
		{count: 32},
		{count: 33, wantErr: "board.yaml: count: must be 1..32 GPUs, got 33"},
		{count: 64, wantErr: "board.yaml: count: must be 1..32 GPUs, got 64"},
	}
	for _, tc := range tests {
		t.Run(strconv.Itoa(tc.count)+" GPUs", func(t *testing.T) {
			p, err := Parse([]byte(nvswitchBoard(tc.count)), "board.yaml")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			srv, _, err := p.NewServer("n")
			if err != nil {
				t.Fatal(err)
			}
			if ret := srv.Init(); ret != nvml.SUCCESS {
				t.Fatalf("Init: %v", ret)
			}
			views := walk(t, srv)
			if len(views) != tc.count {
				t.Fatalf("%d GPUs, want %d", len(views), tc.count)
			}
			for _, v := range views {
				if len(v.links) != 18 || v.links[0].kind != nvml.NVLINK_DEVICE_TYPE_SWITCH {
					t.Fatalf("GPU %d: %d links (first to %v), want 18 to NVSwitches", v.index, len(v.links), v.links[0].kind)
				}
			}
		})
	}
}

func TestParseNamesTheLimit(t *testing.T) {
	tests := []struct {
		name string
		old  string // text of v100 to replace
		new  string
		want string
	}{
		{"a second document", "count: 2\n", "count: 2\n---\nname: other\n", "dgx-v100.yaml: 2 YAML documents: a second one follows a --- separator, and a profile is one YAML document"},
		{"NUMA node out of range", "numaNode: 0", "numaNode: 4096", "dgx-v100.yaml: pcie.roots[0].numaNode: must be 0..1023, got 4096"},
		{"buses past 0xff", "pci0000:00", "pci0000:fd", "dgx-v100.yaml: pcie.roots[0].name: its switches and GPUs need buses 0xfd..0x101, but bus numbers end at 0xff"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := strings.Replace(v100, tc.old, tc.new, 1)
			if doc == v100 {
				t.Fatalf("test case does not change the profile: %q not found", tc.old)
			}
			_, err := Parse([]byte(doc), "dgx-v100.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error:\n%v\nwant it to contain:\n%s", err, tc.want)
			}
		})
	}
}

func TestParseAcceptsEmptyTrailingDocuments(t *testing.T) {
	for name, doc := range map[string]string{
		"a leading separator":  "---\n" + v100,
		"a trailing separator": v100 + "---\n",
		"an end marker":        v100 + "...\n",
		"a trailing comment":   v100 + "---\n# nothing here\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse([]byte(doc), "dgx-v100.yaml"); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestParseRefusesTooManyRootPorts(t *testing.T) {
	doc := nvswitchBoard(32)
	var gpus []string
	for g := range 32 {
		gpus = append(gpus, strconv.Itoa(g))
	}
	start, end := strings.Index(doc, "  roots:\n"), strings.Index(doc, "nvlink:")
	doc = doc[:start] + "  roots:\n  - name: pci0000:00\n    numaNode: 0\n    gpus: [" + strings.Join(gpus, ", ") + "]\n" + doc[end:]
	_, err := Parse([]byte(doc), "board.yaml")
	if want := "board.yaml: pcie.roots[0]: 32 PCIe switches and directly attached GPUs, but a root complex has at most 31 root ports"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error:\n%v\nwant it to contain:\n%s", err, want)
	}
}

func TestLoadFileBoundsItsSize(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, padding, wantErr string
	}{
		{"a profile at the limit", strings.Repeat("#", MaxProfileBytes-len(v100)-1) + "\n", ""},
		{"a profile over the limit", strings.Repeat("#", MaxProfileBytes-len(v100)) + "\n", "larger than the 1048576-byte (1 MiB) limit on profile files"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			if err := os.WriteFile(file, []byte(v100+tc.padding), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := LoadFile(file)
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), file+": "+tc.wantErr)) {
				t.Errorf("LoadFile error = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

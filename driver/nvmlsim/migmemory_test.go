package nvmlsim

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	nvdev "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// realMIGNames are the GPU-instance profiles, each with the compute instance that uses all
// of it, that NVIDIA's MIG user guide lists for the GPUs whose tables a profile may take.
var realMIGNames = map[string][]string{
	"A100_PCIE_40GB":  {"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"},
	"A100_SXM4_40GB":  {"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"},
	"A100_PCIE_80GB":  {"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
	"A100_SXM4_80GB":  {"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
	"A30_PCIE_24GB":   {"1g.6gb", "1g.6gb+me", "2g.12gb", "2g.12gb+me", "4g.24gb"},
	"H100_SXM5_80GB":  {"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
	"H200_SXM5_141GB": {"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"},
	"B200_SXM5_180GB": {"1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"},
}

// oneGPU is a profile of one GPU of model with the gpu fields in gpu (YAML, indented).
func oneGPU(model, gpu string) string {
	return fmt.Sprintf("name: mig\nmodel: %s\ncount: 1\ndriver: {version: 550.54.15, cudaVersion: \"12.4\"}\n"+
		"gpu:\n  multiprocessors: 100\n%spcie:\n  roots:\n  - {name: pci0000:17, numaNode: 0, gpus: [0]}\n", model, gpu)
}

// servedMIGNames names the MIG profiles of GPU 0 of srv from its NVML answers, as discovery
// does: each GPU-instance profile NVML reports, by go-nvlib, from its memory and the GPU's.
func servedMIGNames(t *testing.T, srv nvml.Interface) []string {
	t.Helper()
	d, ret := srv.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatalf("DeviceGetHandleByIndex(0): %v", ret)
	}
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		t.Fatalf("GetMemoryInfo: %v", ret)
	}
	lib := nvdev.New(nil)
	var names []string
	for id := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		p, ret := d.GetGpuInstanceProfileInfo(id)
		if ret != nvml.SUCCESS {
			continue
		}
		ci, ok := fullComputeInstance[p.SliceCount]
		if !ok {
			t.Fatalf("GPU-instance profile %d has %d slices", id, p.SliceCount)
		}
		name, err := lib.NewMigProfile(id, ci, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, p.MemorySizeMB, mem.Total)
		if err != nil {
			t.Fatalf("GPU-instance profile %d: %v", id, err)
		}
		names = append(names, name.String())
	}
	slices.Sort(names)
	return names
}

// Every GPU a profile may take MIG tables from, by model or base, reports the MIG profiles
// the real GPU does.
func TestMIGProfilesAreNamedAsOnTheRealGPU(t *testing.T) {
	for model, want := range realMIGNames {
		t.Run(model, func(t *testing.T) {
			p, err := Parse([]byte(oneGPU(model, "")), "mig.yaml")
			if err != nil {
				t.Fatal(err)
			}
			srv, _, err := p.NewServer("n")
			if err != nil {
				t.Fatal(err)
			}
			if got := servedMIGNames(t, srv); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
				t.Errorf("MIG profiles %v, want %v", got, want)
			}
		})
	}
	for base, b := range baseServers {
		t.Run(base, func(t *testing.T) {
			doc := "name: mig\nbase: " + base + "\npcie:\n  roots:\n  - {name: pci0000:17, numaNode: 0, gpus: [0, 1, 2, 3, 4, 5, 6, 7]}\n"
			p, err := Parse([]byte(doc), "mig.yaml")
			if err != nil {
				t.Fatal(err)
			}
			srv, _, err := p.NewServer("n")
			if err != nil {
				t.Fatal(err)
			}
			if got, want := servedMIGNames(t, srv), slices.Sorted(slices.Values(realMIGNames[b.model])); !slices.Equal(got, want) {
				t.Errorf("MIG profiles %v, want %v", got, want)
			}
		})
	}
	for model, m := range gpuModels {
		if _, ok := realMIGNames[model]; !ok && len(m.config.MIGProfiles.GpuInstanceProfiles) > 0 {
			t.Errorf("%s has MIG tables but no names in realMIGNames", model)
		}
	}
}

func TestBuiltinAndExampleMIGProfilesAreNamedAsOnTheRealGPU(t *testing.T) {
	for _, name := range append(BuiltinNames(), "example.yaml") {
		srv := open(t, name, "n")
		names := servedMIGNames(t, srv)
		if len(names) == 0 {
			continue
		}
		if !slices.Equal(names, slices.Sorted(slices.Values(realMIGNames["H100_SXM5_80GB"]))) &&
			!slices.Equal(names, slices.Sorted(slices.Values(realMIGNames["A100_SXM4_40GB"]))) {
			t.Errorf("%s: MIG profiles %v, which no A100 40GB or H100 80GB reports", name, names)
		}
	}
}

// GPU memory other than that of the GPU whose MIG tables a profile takes is refused, naming
// the field, the memory, the names NVML would give and the memory that fits.
func TestParseRefusesMemoryThatRenamesMIGProfiles(t *testing.T) {
	tests := []struct {
		name, model, gpu string
		want             []string // "" = accepted
	}{
		{"the H100 tables on 81559 MiB", "H100_SXM5_80GB", "  memoryMiB: 81559\n", []string{
			"mig.yaml: gpu.memoryMiB: 81559 MiB do not fit the MIG tables of H100_SXM5_80GB (model): NVML would name their profiles 1g.20gb instead of 1g.10gb, ",
			"7g.90gb instead of 7g.80gb", "1g.30gb instead of 1g.20gb, names no GPU reports",
			"accepted: gpu.memoryMiB 81920 with these tables, or with 81559 MiB gpu.mig A100_PCIE_80GB, A100_SXM4_80GB or none"}},
		{"the H100 tables named in gpu.mig", "A100_SXM4_80GB", "  memoryMiB: 81559\n  mig: H100_SXM5_80GB\n", []string{
			"gpu.memoryMiB: 81559 MiB do not fit the MIG tables of H100_SXM5_80GB (gpu.mig): NVML would name"}},
		{"the H100 tables on an A100 40GB's memory, names alike", "A100_SXM4_40GB", "  mig: H100_SXM5_80GB\n", []string{
			"gpu.mig: the GPU's 40960 MiB do not fit the MIG tables of H100_SXM5_80GB (gpu.mig): they are those of a GPU of 81920 MiB; accepted: gpu.memoryMiB 81920 with these tables",
			"or with 40960 MiB gpu.mig A100_PCIE_40GB, A100_SXM4_40GB or none"}},
		{"the A100 40GB tables on 80 GiB", "A100_SXM4_40GB", "  memoryMiB: 81920\n", []string{
			"1g.10gb instead of 1g.5gb", "accepted: gpu.memoryMiB 40192..40960 with these tables, or with 81920 MiB gpu.mig A100_PCIE_80GB, A100_SXM4_80GB, H100_SXM5_80GB or none"}},
		{"the A30 tables on twice their memory, names alike", "A30_PCIE_24GB", "  memoryMiB: 49152\n", []string{
			"gpu.memoryMiB: 49152 MiB do not fit the MIG tables of A30_PCIE_24GB (model): they are those of a GPU of 24576 MiB; accepted: gpu.memoryMiB 23553..24576 with these tables, or with 49152 MiB gpu.mig none"}},
		{"a real A100 40GB's memory", "A100_SXM4_40GB", "  memoryMiB: 40536\n", nil},
		{"other memory without MIG tables", "H100_SXM5_80GB", "  memoryMiB: 81559\n  mig: none\n", nil},
		{"the H100 tables on their own memory", "A100_SXM4_80GB", "  mig: H100_SXM5_80GB\n", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(oneGPU(tc.model, tc.gpu)), "mig.yaml")
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted:\n%s", oneGPU(tc.model, tc.gpu))
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error:\n%v\nwant it to contain:\n%s", err, want)
				}
			}
		})
	}
}

// The memory range a MIG table accepts is the one its check reports: each end fits, the
// MiB past it does not.
func TestMIGMemoryRangeEndsWhereNamesChange(t *testing.T) {
	for model, m := range gpuModels {
		if len(m.config.MIGProfiles.GpuInstanceProfiles) == 0 {
			continue
		}
		lo, hi := migMemoryRange(m.config)
		want := migNames(m.config.MIGProfiles, m.config.MemoryMB)
		fits := func(mem uint64) bool { return slices.Equal(migNames(m.config.MIGProfiles, mem), want) }
		if lo > m.config.MemoryMB || hi < m.config.MemoryMB || !fits(lo) || !fits(hi) || fits(lo-1) || fits(hi+1) {
			t.Errorf("%s (%d MiB): accepted %d..%d MiB; fits(%d)=%v fits(%d)=%v", model, m.config.MemoryMB, lo, hi, lo-1, fits(lo-1), hi+1, fits(hi+1))
		}
	}
}

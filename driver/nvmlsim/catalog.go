package nvmlsim

import (
	"maps"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// gpuModel is a go-nvml gpus.Config plus what it lacks.
type gpuModel struct {
	config          gpus.Config
	multiprocessors int
}

// gpuModels are the go-nvml GPU configs a profile may name in model or gpu.mig.
var gpuModels = map[string]gpuModel{
	"A100_PCIE_40GB":  {gpus.A100_PCIE_40GB, 108},
	"A100_PCIE_80GB":  {gpus.A100_PCIE_80GB, 108},
	"A100_SXM4_40GB":  {gpus.A100_SXM4_40GB, 108},
	"A100_SXM4_80GB":  {gpus.A100_SXM4_80GB, 108},
	"A30_PCIE_24GB":   {gpus.A30_PCIE_24GB, 56},
	"H100_SXM5_80GB":  {gpus.H100_SXM5_80GB, 132},
	"H200_SXM5_141GB": {h200, 132},
	"B200_SXM5_180GB": {b200, 148},
}

// go-nvml's H200 and B200 tables give the one-slice profiles (and the H200's three- and
// four-slice ones) more than their share of the GPU's memory, so NVML's naming, from that
// share rounded up to eighths, would call them 1g.35gb, 3g.88gb, 4g.88gb and 1g.45gb. With
// an eighth (a half) of the GPU's memory they are the 1g.18gb, 3g.71gb, 4g.71gb and
// 1g.23gb those GPUs report.
var (
	h200 = withMIGMemory(gpus.H200_SXM5_141GB, map[int]uint64{
		nvml.GPU_INSTANCE_PROFILE_1_SLICE: 18048, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: 18048,
		nvml.GPU_INSTANCE_PROFILE_3_SLICE: 72192, nvml.GPU_INSTANCE_PROFILE_4_SLICE: 72192,
	})
	b200 = withMIGMemory(gpus.B200_SXM5_180GB, map[int]uint64{
		nvml.GPU_INSTANCE_PROFILE_1_SLICE: 23040, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: 23040,
	})
)

// withMIGMemory returns c with the memory, in MiB, of some of its GPU-instance profiles
// changed; go-nvml's maps are not changed.
func withMIGMemory(c gpus.Config, memMiB map[int]uint64) gpus.Config {
	profiles := maps.Clone(c.MIGProfiles.GpuInstanceProfiles)
	for id, m := range memMiB {
		p := profiles[id]
		p.MemorySizeMB = m
		profiles[id] = p
	}
	c.MIGProfiles.GpuInstanceProfiles = profiles
	return c
}

// baseServer is a go-nvml mock server package a profile may start from.
type baseServer struct {
	model string
	new   func(...gpus.Config) *server.Server
}

var baseServers = map[string]baseServer{
	"dgxa100": {"A100_SXM4_40GB", dgxa100.NewWithGPUs},
	"dgxh100": {"H100_SXM5_80GB", dgxh100.NewWithGPUs},
	"dgxh200": {"H200_SXM5_141GB", dgxh200.NewWithGPUs},
	"dgxb200": {"B200_SXM5_180GB", dgxb200.NewWithGPUs},
}

var architectures = map[string]nvml.DeviceArchitecture{
	"volta":     nvml.DEVICE_ARCH_VOLTA,
	"turing":    nvml.DEVICE_ARCH_TURING,
	"ampere":    nvml.DEVICE_ARCH_AMPERE,
	"ada":       nvml.DEVICE_ARCH_ADA,
	"hopper":    nvml.DEVICE_ARCH_HOPPER,
	"blackwell": nvml.DEVICE_ARCH_BLACKWELL,
}

var architectureOrder = []string{"volta", "turing", "ampere", "ada", "hopper", "blackwell"}

var brands = map[string]nvml.BrandType{
	"nvidia":      nvml.BRAND_NVIDIA,
	"tesla":       nvml.BRAND_TESLA,
	"quadro":      nvml.BRAND_QUADRO,
	"geforce":     nvml.BRAND_GEFORCE,
	"titan":       nvml.BRAND_TITAN,
	"nvidia-rtx":  nvml.BRAND_NVIDIA_RTX,
	"quadro-rtx":  nvml.BRAND_QUADRO_RTX,
	"geforce-rtx": nvml.BRAND_GEFORCE_RTX,
	"titan-rtx":   nvml.BRAND_TITAN_RTX,
	"grid":        nvml.BRAND_GRID,
	"nvs":         nvml.BRAND_NVS,
}

// NVSwitch PCI device ids by generation: gen2 (A100 systems), gen3 (H100 and later).
const (
	nvswitchGen2DeviceID = 0x1AF110DE
	nvswitchGen3DeviceID = 0x22A310DE
)

func sortedKeys[V any](m map[string]V) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return strings.Join(keys, ", ")
}

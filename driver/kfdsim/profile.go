package kfdsim

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

//go:embed profiles/*.yaml
var builtinFS embed.FS

// Profile describes a simulated AMD or Hygon node.
type Profile struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// NVIDIA names a simulated NVML profile (driver/nvmlsim) for the NVIDIA GPUs of the
	// same node; "" for none.
	NVIDIA string `json:"nvidia,omitempty"`
	// Vendor is "amd" or "hygon".
	Vendor      string `json:"vendor"`
	ProductName string `json:"productName"`
	// DeviceID is the PCI device id, e.g. "0x74a1".
	DeviceID string `json:"deviceID"`
	// GFXTargetVersion is KFD's gfx_target_version, e.g. 90402 (gfx942).
	GFXTargetVersion uint64 `json:"gfxTargetVersion"`
	// Memory is each GPU's (each GCD's) memory.
	Memory       resource.Quantity `json:"memory"`
	ComputeUnits int               `json:"computeUnits"`
	SIMDPerCU    int               `json:"simdPerCU"`
	XCCs         int               `json:"xccs"`
	// GPUs is how many PCI functions (GPUs, or GCDs of an MI250X) the node has.
	GPUs int `json:"gpus"`
	// Partitions is how many KFD nodes each GPU shows (CPX MI300X: 8); 0 means 1.
	Partitions int `json:"partitions,omitempty"`
	// GCDsPerPackage groups consecutive GPUs into one module (MI250X: 2); 0 means 1.
	GCDsPerPackage   int    `json:"gcdsPerPackage,omitempty"`
	ComputePartition string `json:"computePartition,omitempty"`
	MemoryPartition  string `json:"memoryPartition,omitempty"`
	// XGMI puts all GPUs in one hive, each linked to every other.
	XGMI bool `json:"xgmi,omitempty"`
	// NUMANodes splits the GPUs evenly over that many NUMA nodes (CPU nodes in KFD).
	NUMANodes int `json:"numaNodes"`
	// FirstBus is the first GPU's PCI bus ("0x05" by default); each next GPU's is 0x10 on.
	FirstBus string `json:"firstBus,omitempty"`

	deviceID, firstBus uint64
}

// BuiltinNames lists the built-in profiles.
func BuiltinNames() []string {
	entries, _ := fs.ReadDir(builtinFS, "profiles")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(names)
	return names
}

// Load returns the built-in profile called name, or reads the profile file name (a path
// ending in .yaml or containing a slash).
func Load(name string) (*Profile, error) {
	if strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") || strings.ContainsRune(name, os.PathSeparator) {
		data, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("simulated KFD profile: %w", err)
		}
		return Parse(data, name)
	}
	data, err := builtinFS.ReadFile(path.Join("profiles", name+".yaml"))
	if err != nil || strings.ContainsAny(name, `/\`) {
		return nil, fmt.Errorf("no built-in simulated KFD profile %q; built-in profiles are %s, or give a path to a .yaml profile", name, strings.Join(BuiltinNames(), ", "))
	}
	return Parse(data, name+".yaml")
}

// Parse decodes and checks a profile; source names it in errors.
func Parse(data []byte, source string) (*Profile, error) {
	p := &Profile{}
	if err := yaml.UnmarshalStrict(data, p); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return p, nil
}

func (p *Profile) validate() error {
	var err error
	switch {
	case p.Name == "":
		return fmt.Errorf("name: required")
	case p.Vendor != "amd" && p.Vendor != "hygon":
		return fmt.Errorf("vendor %q: accepted values are amd, hygon", p.Vendor)
	case p.GPUs < 1 || p.GPUs > 16:
		return fmt.Errorf("gpus %d: accepted range is 1 to 16", p.GPUs)
	case p.Partitions < 0 || p.Partitions > 8:
		return fmt.Errorf("partitions %d: accepted range is 1 to 8 (0: 1)", p.Partitions)
	case p.GCDsPerPackage < 0 || p.GCDsPerPackage > 2 || (p.GCDsPerPackage == 2 && p.GPUs%2 != 0):
		return fmt.Errorf("gcdsPerPackage %d: accepted values are 1 and 2 (an even gpus)", p.GCDsPerPackage)
	case p.NUMANodes < 1 || p.NUMANodes > p.GPUs:
		return fmt.Errorf("numaNodes %d: accepted range is 1 to gpus (%d)", p.NUMANodes, p.GPUs)
	case p.ComputeUnits < 1 || p.SIMDPerCU < 1 || p.XCCs < 1:
		return fmt.Errorf("computeUnits, simdPerCU and xccs: each at least 1")
	case p.Memory.Sign() <= 0:
		return fmt.Errorf("memory: required, more than 0")
	}
	if p.deviceID, err = strconv.ParseUint(p.DeviceID, 0, 16); err != nil {
		return fmt.Errorf("deviceID %q: a 16-bit PCI device id such as \"0x74a1\"", p.DeviceID)
	}
	p.firstBus = 0x05
	if p.FirstBus != "" {
		if p.firstBus, err = strconv.ParseUint(p.FirstBus, 0, 8); err != nil {
			return fmt.Errorf("firstBus %q: a PCI bus number such as \"0x05\"", p.FirstBus)
		}
	}
	if p.firstBus+0x10*uint64(p.GPUs-1) > 0xff {
		return fmt.Errorf("firstBus %q: %d GPUs 0x10 apart pass bus 0xff", p.FirstBus, p.GPUs)
	}
	return nil
}

package nvmlsim

import (
	"embed"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Profile is the YAML description of a simulated node. See the package documentation
// and example.yaml for the meaning of each field; Parse validates it.
type Profile struct {
	// Name identifies the profile and feeds the UUIDs.
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Base names a go-nvml mock server (package mock/<base>) to start from.
	Base string `json:"base,omitempty"`
	// Model names a go-nvml gpus.Config to take the GPU from.
	Model  string  `json:"model,omitempty"`
	Count  int     `json:"count,omitempty"`
	Driver Driver  `json:"driver,omitempty"`
	GPU    GPU     `json:"gpu,omitempty"`
	PCIe   PCIe    `json:"pcie"`
	NVLink *NVLink `json:"nvlink,omitempty"`

	source string
	node   *node // the validated, resolved form
}

// Driver is the NVIDIA driver the simulated node reports.
type Driver struct {
	Version     string     `json:"version,omitempty"`
	CUDAVersion flexString `json:"cudaVersion,omitempty"`
	NVMLVersion string     `json:"nvmlVersion,omitempty"`
}

// GPU describes the (identical) GPUs of the node; set fields override Base or Model.
type GPU struct {
	Name              string     `json:"name,omitempty"`
	Brand             string     `json:"brand,omitempty"`
	Architecture      string     `json:"architecture,omitempty"`
	ComputeCapability flexString `json:"computeCapability,omitempty"`
	MemoryMiB         uint64     `json:"memoryMiB,omitempty"`
	Multiprocessors   int        `json:"multiprocessors,omitempty"`
	PCIDeviceID       flexString `json:"pciDeviceId,omitempty"`
	MIG               string     `json:"mig,omitempty"`
	MIGEnabled        bool       `json:"migEnabled,omitempty"`
}

// PCIe is the node's PCIe layout.
type PCIe struct {
	Roots []PCIeRoot `json:"roots"`
}

// PCIeRoot is one PCIe root complex (a host bridge) and the GPUs below it.
type PCIeRoot struct {
	// Name is the sysfs name of the root complex, "pci<domain>:<bus>", e.g. pci0000:17.
	Name     string `json:"name"`
	NUMANode *int   `json:"numaNode"`
	// GPUs are attached directly to root ports of this root complex.
	GPUs []int `json:"gpus,omitempty"`
	// Switches group GPUs that share a PCIe switch below this root complex.
	Switches [][]int `json:"switches,omitempty"`
}

// NVLink is the GPUs' NVLink wiring: a point-to-point Matrix or an NVSwitch fabric.
type NVLink struct {
	LinksPerGPU int        `json:"linksPerGPU,omitempty"`
	Matrix      LinkMatrix `json:"matrix,omitempty"`
	NVSwitch    *NVSwitch  `json:"nvswitch,omitempty"`
}

// NVSwitch is a fabric of Count switches; each GPU spreads its links evenly over them.
type NVSwitch struct {
	Count       int        `json:"count"`
	PCIDeviceID flexString `json:"pciDeviceId,omitempty"`
}

//go:embed profiles/*.yaml
var builtinFS embed.FS

// BuiltinNames returns the sorted names of the built-in profiles.
func BuiltinNames() []string {
	entries, _ := fs.ReadDir(builtinFS, "profiles")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(names)
	return names
}

// Builtin returns the built-in profile called name.
func Builtin(name string) (*Profile, error) {
	file := path.Join("profiles", name+".yaml")
	data, err := builtinFS.ReadFile(file)
	if err != nil || strings.ContainsAny(name, "/\\") {
		return nil, fmt.Errorf("no built-in simulated profile %q; built-in profiles are %s, or give a path to a .yaml profile",
			name, strings.Join(BuiltinNames(), ", "))
	}
	return Parse(data, name+".yaml")
}

// MaxProfileBytes is the largest profile file LoadFile reads; the built-in profiles are
// about 1 KiB, a 32-GPU link matrix under 4 KiB.
const MaxProfileBytes = 1 << 20

// LoadFile reads and parses the profile file at path.
func LoadFile(path string) (*Profile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("simulated profile: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxProfileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("simulated profile: %w", err)
	}
	if len(data) > MaxProfileBytes {
		return nil, fmt.Errorf("simulated profile %s: larger than the %d-byte (1 MiB) limit on profile files", path, MaxProfileBytes)
	}
	return Parse(data, path)
}

// Open returns a simulated server and its sysfs view for name, which is a built-in
// profile name or a path to a profile file (anything ending in .yaml or .yml, or
// containing a path separator). seed, normally the node name, makes identities
// stable and distinct per node. The server still needs Init like real NVML.
func Open(name, seed string) (nvml.Interface, fs.ReadLinkFS, error) {
	var p *Profile
	var err error
	if strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") || strings.ContainsRune(name, os.PathSeparator) {
		p, err = LoadFile(name)
	} else {
		p, err = Builtin(name)
	}
	if err != nil {
		return nil, nil, err
	}
	return p.NewServer(seed)
}

package driver

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/driver/nvmlsim"
)

// Backend is where discovery reads from: an NVML implementation plus the host's
// sysfs view (PCIe root complex, NUMA node), which NVML does not report.
type Backend struct {
	// Name is "nvml" for the real library or "sim:<profile>" for a simulated server.
	Name string
	// NVML is go-nvml's interface: the real library or a simulated server.
	NVML nvml.Interface
	// SysFS is the /sys view used for PCIe roots and NUMA nodes; nil means the host's /sys.
	SysFS fs.ReadLinkFS
	// Simulated is true for simulated backends (test doubles and demos, never a fallback).
	Simulated bool
}

// OpenBackend selects the NVML backend named by spec:
//
//	"" or "nvml"        the real NVML library (libnvidia-ml.so.1) — the default
//	"sim:<profile>"     a built-in simulated node (see nvmlsim.BuiltinNames)
//	"sim:<file.yaml>"   a simulated node described by a profile file
//
// seed makes simulated identities (UUIDs, serials) stable and distinct per node; it is
// ignored for real NVML. A real backend whose library cannot be loaded is an error, never
// a silent switch to a simulated one. The returned backend is initialised; call Close.
func OpenBackend(spec, seed string) (*Backend, error) {
	switch {
	case spec == "" || spec == "nvml":
		lib := nvml.New()
		if ret := lib.Init(); ret != nvml.SUCCESS {
			return nil, realNVMLError(ret)
		}
		return &Backend{Name: "nvml", NVML: lib}, nil
	case strings.HasPrefix(spec, "sim:"):
		name := strings.TrimPrefix(spec, "sim:")
		server, sysfs, err := nvmlsim.Open(name, seed)
		if err != nil {
			return nil, fmt.Errorf("--nvml=%s: %w", spec, err)
		}
		if ret := server.Init(); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("--nvml=%s: simulated NVML Init: %v", spec, ret)
		}
		return &Backend{Name: spec, NVML: server, SysFS: sysfs, Simulated: true}, nil
	default:
		return nil, fmt.Errorf("--nvml=%q: accepted values are \"nvml\" (the real library, default), \"sim:<profile>\" with a built-in profile (%s) or \"sim:<path to a profile .yaml>\"",
			spec, strings.Join(nvmlsim.BuiltinNames(), ", "))
	}
}

// Close shuts NVML down.
func (b *Backend) Close() error {
	if ret := b.NVML.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("NVML shutdown: %v", ret)
	}
	return nil
}

// ErrNVMLUnavailable is wrapped by OpenBackend when the real NVML library cannot be used.
var ErrNVMLUnavailable = errors.New("NVML is not available")

func realNVMLError(ret nvml.Return) error {
	hint := "to try gpudra without a GPU, pass --nvml=sim:<profile> (built-in: " + strings.Join(nvmlsim.BuiltinNames(), ", ") + ")"
	if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
		return fmt.Errorf("%w: libnvidia-ml.so.1 was not found (is the NVIDIA driver installed and the driver root mounted?); %s", ErrNVMLUnavailable, hint)
	}
	return fmt.Errorf("%w: nvmlInit failed: %v; %s", ErrNVMLUnavailable, ret.Error(), hint)
}

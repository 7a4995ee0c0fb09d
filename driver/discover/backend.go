package discover

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
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
	// KFD, when set, is the sysfs tree (rooted like /sys) AMD and Hygon GPUs are read
	// from (driver/kfd); nil: none. NVML may then be nil, for a node without NVIDIA GPUs.
	KFD fs.FS
}

// ErrNVMLUnavailable is wrapped by OpenNVML when the real NVML library cannot be used.
var ErrNVMLUnavailable = errors.New("NVML is not available")

// OpenNVML loads and initialises the real NVML library (libnvidia-ml.so.1). A library that
// cannot be loaded is an error wrapping ErrNVMLUnavailable. Call Close.
func OpenNVML() (*Backend, error) {
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			return nil, fmt.Errorf("%w: libnvidia-ml.so.1 was not found (is the NVIDIA driver installed and the driver root mounted?)", ErrNVMLUnavailable)
		}
		return nil, fmt.Errorf("%w: nvmlInit failed: %v", ErrNVMLUnavailable, ret.Error())
	}
	return &Backend{Name: "nvml", NVML: lib}, nil
}

// Close shuts NVML down.
func (b *Backend) Close() error {
	if b.NVML == nil {
		return nil
	}
	if ret := b.NVML.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("NVML shutdown: %v", ret)
	}
	return nil
}

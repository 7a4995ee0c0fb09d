package nvmlbackend

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/gpudra/gpudra/driver/discover"
	"github.com/gpudra/gpudra/driver/kfd"
	"github.com/gpudra/gpudra/driver/kfdsim"
)

// OpenNode opens what a node's plugin discovers: NVML as Open does (nvmlSpec "none": no
// NVML, for a node without NVIDIA GPUs) and the KFD topology kfdSpec names:
//
//	""               none (the default)
//	"sysfs"          this machine's /sys; a machine without a KFD topology is an error
//	"sim:<profile>"  a simulated node (kfdsim.BuiltinNames, or a profile file); with
//	                 nvmlSpec "none" the NVIDIA GPUs its profile names, if any, are simulated too
//
// A real KFD topology that cannot be read is an error, never a switch to a simulated one.
func OpenNode(nvmlSpec, kfdSpec, seed string) (*discover.Backend, error) {
	if nvmlSpec == "none" && kfdSpec == "" {
		return nil, errors.New(`--nvml=none needs --kfd ("sysfs" or "sim:<profile>"): the node would have no GPUs`)
	}
	var b *discover.Backend
	switch {
	case kfdSpec == "":
		return Open(nvmlSpec, seed)
	case kfdSpec == "sysfs":
		if _, err := kfd.Discover(os.DirFS("/sys")); err != nil {
			return nil, fmt.Errorf("--kfd=sysfs: %w; to try gpudra without an AMD GPU, pass --kfd=sim:<profile> (built-in: %s)", err, strings.Join(kfdsim.BuiltinNames(), ", "))
		}
		b = &discover.Backend{Name: "kfd", KFD: os.DirFS("/sys")}
	case strings.HasPrefix(kfdSpec, "sim:"):
		p, err := kfdsim.Load(strings.TrimPrefix(kfdSpec, "sim:"))
		if err != nil {
			return nil, fmt.Errorf("--kfd=%s: %w", kfdSpec, err)
		}
		b = &discover.Backend{Name: "kfd-" + kfdSpec, KFD: p.Tree(seed), Simulated: true}
		if nvmlSpec == "none" && p.NVIDIA != "" {
			nvmlSpec = "sim:" + p.NVIDIA
		}
	default:
		return nil, fmt.Errorf(`--kfd=%q: accepted values are "" (none), "sysfs" (this machine's /sys/class/kfd) or "sim:<profile>" (built-in: %s) or "sim:<path to a profile .yaml>"`,
			kfdSpec, strings.Join(kfdsim.BuiltinNames(), ", "))
	}
	if nvmlSpec == "none" {
		return b, nil
	}
	nv, err := Open(nvmlSpec, seed)
	if err != nil {
		return nil, err
	}
	if b.Simulated != nv.Simulated {
		nv.Close()
		return nil, fmt.Errorf("--nvml=%s with --kfd=%s: a node is simulated or real, not both", nvmlSpec, kfdSpec)
	}
	nv.KFD, nv.Name = b.KFD, nv.Name+"+"+b.Name
	return nv, nil
}

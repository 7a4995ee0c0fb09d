package main

import (
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpudra/gpudra/cmd/internal/nvmlbackend"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/discover"
	"github.com/gpudra/gpudra/driver/kfd"
	"github.com/gpudra/gpudra/driver/kfdsim"
	"github.com/gpudra/gpudra/driver/simulated"
)

func (f *nodeFlags) registerKFD(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.kfd, "kfd", "", `AMD and Hygon GPUs: "" (none), "sysfs" (this machine's /sys/class/kfd), or a simulated node "sim:<profile>" (built-in: `+strings.Join(kfdsim.BuiltinNames(), ", ")+`) / "sim:<profile.yaml>"; NVML is then read only when --nvml is given (a simulated profile may name its own NVIDIA GPUs)`)
	cmd.Flags().StringVar(&f.sysfs, "sysfs", "", "read AMD and Hygon GPUs from DIR, a copy of a node's /sys holding class/kfd and class/drm (implies --kfd=sysfs)")
}

// kfdTree is where AMD GPUs are read from: nil when neither --kfd nor --sysfs asks for
// them, and the simulated NVML profile a simulated KFD profile names.
func (f *nodeFlags) kfdTree() (tree fs.FS, name, nvidiaSim string, err error) {
	switch {
	case f.sysfs != "":
		if f.kfd != "" && f.kfd != "sysfs" {
			return nil, "", "", fmt.Errorf("--sysfs=%s and --kfd=%s: give one", f.sysfs, f.kfd)
		}
		if st, err := os.Stat(f.sysfs); err != nil || !st.IsDir() {
			return nil, "", "", fmt.Errorf("--sysfs=%s: not a directory", f.sysfs)
		}
		return os.DirFS(f.sysfs), "sysfs:" + f.sysfs, "", nil
	case f.kfd == "":
		return nil, "", "", nil
	case f.kfd == "sysfs":
		return os.DirFS("/sys"), "sysfs", "", nil
	case strings.HasPrefix(f.kfd, "sim:"):
		p, err := kfdsim.Load(strings.TrimPrefix(f.kfd, "sim:"))
		if err != nil {
			return nil, "", "", fmt.Errorf("--kfd=%s: %w", f.kfd, err)
		}
		return p.Tree(f.nodeName), "kfd-" + f.kfd, p.NVIDIA, nil
	default:
		return nil, "", "", fmt.Errorf(`--kfd=%q: accepted values are "" (none), "sysfs" or "sim:<profile>" (built-in: %s) or "sim:<path to a profile .yaml>"`, f.kfd, strings.Join(kfdsim.BuiltinNames(), ", "))
	}
}

// inventory discovers the node the flags name: its NVIDIA GPUs through NVML, and its AMD
// and Hygon GPUs through the KFD topology when asked for. nvmlSet says whether --nvml was
// given: with --kfd or --sysfs, NVML is read only then.
func (f *nodeFlags) inventory(nvmlSet bool) (*driver.Inventory, error) {
	tree, name, nvidiaSim, err := f.kfdTree()
	if err != nil {
		return nil, err
	}
	var inv *driver.Inventory
	switch {
	case tree == nil || nvmlSet:
		b, err := nvmlbackend.Open(f.nvml, f.nodeName)
		if err != nil {
			return nil, err
		}
		defer b.Close()
		if inv, err = discover.Discover(b); err != nil {
			return nil, err
		}
	case nvidiaSim != "":
		if inv, err = simulated.Inventory(nvidiaSim, f.nodeName); err != nil {
			return nil, err
		}
	default:
		inv = &driver.Inventory{}
	}
	if tree == nil {
		return inv, nil
	}
	res, err := kfd.Discover(tree)
	if err != nil {
		return nil, err
	}
	inv.AddGPUs(res.GPUs, res.Unreadable)
	inv.Backend = strings.TrimPrefix(inv.Backend+"+"+name, "+")
	return inv, nil
}

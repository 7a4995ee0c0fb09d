// Package simulated opens simulated GPU nodes (driver/nvmlsim) as discovery backends and
// renders the ResourceSlices their kubelet plugin would publish, for tests, demos, the lab
// and the simulator. Production binaries reach it only through an explicit --nvml=sim:...
package simulated

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/discover"
	"github.com/gpudra/gpudra/driver/kfd"
	"github.com/gpudra/gpudra/driver/kfdsim"
	"github.com/gpudra/gpudra/driver/nvmlsim"
)

// Open starts a simulated NVML server for profile (a built-in name, see
// nvmlsim.BuiltinNames, or a profile file) and initialises it. seed makes its identities
// (UUIDs, serials) stable and distinct per node. Call Close.
func Open(profile, seed string) (*discover.Backend, error) {
	server, sysfs, err := nvmlsim.Open(profile, seed)
	if err != nil {
		return nil, err
	}
	if ret := server.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("simulated NVML Init: %v", ret)
	}
	return &discover.Backend{Name: "sim:" + profile, NVML: server, SysFS: sysfs, Simulated: true}, nil
}

// Inventory discovers a simulated node.
func Inventory(profile, seed string) (*driver.Inventory, error) {
	b, err := Open(profile, seed)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	return discover.Discover(b)
}

// Slices discovers a simulated node (seeded with its name) and renders the ResourceSlices
// its kubelet plugin would publish.
func Slices(profile, nodeName string, opts driver.RenderOptions) (*driver.Inventory, []*resourceapi.ResourceSlice, error) {
	inv, err := Inventory(profile, nodeName)
	if err != nil {
		return nil, nil, err
	}
	return render(inv, nodeName, opts)
}

// render renders the ResourceSlices inv's kubelet plugin would publish as node nodeName.
func render(inv *driver.Inventory, nodeName string, opts driver.RenderOptions) (*driver.Inventory, []*resourceapi.ResourceSlice, error) {
	pool, err := driver.Render(inv, opts)
	if err != nil {
		return nil, nil, err
	}
	return inv, pool.ResourceSlices(nodeName, 1), nil
}

// KFDInventory discovers a simulated AMD or Hygon node (a driver/kfdsim profile, seeded
// with seed): its NVIDIA GPUs from the simulated NVML profile it names, if any, then its
// KFD GPUs.
func KFDInventory(profile, seed string) (*driver.Inventory, error) {
	p, err := kfdsim.Load(profile)
	if err != nil {
		return nil, err
	}
	inv := &driver.Inventory{Backend: "kfd-sim:" + profile}
	if p.NVIDIA != "" {
		if inv, err = Inventory(p.NVIDIA, seed); err != nil {
			return nil, fmt.Errorf("%s: nvidia %s: %w", profile, p.NVIDIA, err)
		}
		inv.Backend = "sim:" + p.NVIDIA + "+kfd-sim:" + profile
	}
	res, err := kfd.Discover(p.Tree(seed))
	if err != nil {
		return nil, err
	}
	inv.AddGPUs(res.GPUs, res.Unreadable)
	return inv, nil
}

// KFDSlices discovers a simulated AMD or Hygon node (a driver/kfdsim profile, seeded with
// its name) and renders the ResourceSlices its kubelet plugin would publish.
func KFDSlices(profile, nodeName string, opts driver.RenderOptions) (*driver.Inventory, []*resourceapi.ResourceSlice, error) {
	inv, err := KFDInventory(profile, nodeName)
	if err != nil {
		return nil, nil, err
	}
	return render(inv, nodeName, opts)
}

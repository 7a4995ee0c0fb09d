package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/sim/reproduction"
	"github.com/gpudra/gpudra/topology"
	"github.com/gpudra/gpudra/topology/placement"
)

// Mode says who chooses the GPUs inside the chosen node.
type Mode string

const (
	// Reproduction pins the policy's (the paper's) GPU choice in the claim; the
	// allocator checks it.
	Reproduction Mode = "reproduction"
	// DRA lets the allocator choose, as in a real cluster.
	DRA Mode = "dra"
)

// Modes lists the accepted modes.
var Modes = []Mode{Reproduction, DRA}

// Inventory is the gpudra inventory of a trace node: its GPUs of the node's model,
// no NVLink (the trace does not say), no MIG.
func Inventory(n placement.NodeSpec) (*driver.Inventory, error) {
	inv := &driver.Inventory{Backend: "sim:trace", DriverVersion: "550.54.15", CUDADriverVersion: "12.4", NVLink: topology.NewNVLinkGraph(n.GPUs)}
	if n.GPUs == 0 {
		return inv, nil
	}
	m, err := placement.ModelByCode(n.Model)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Name, err)
	}
	for i := range n.GPUs {
		inv.GPUs = append(inv.GPUs, driver.GPU{
			Index: i, Minor: i,
			UUID:            fmt.Sprintf("GPU-%s-%d", n.Name, i),
			ProductName:     m.ProductName,
			Brand:           "Tesla",
			Architecture:    m.Architecture,
			MemoryBytes:     uint64(m.MemoryMiB) << 20,
			Multiprocessors: m.Multiprocessors,
			PCIBusID:        fmt.Sprintf("0000:%02x:00.0", 0x10+i),
		})
	}
	return inv, nil
}

// Slices renders a trace node's ResourceSlices: whole GPUs and shares, no MIG.
func Slices(n placement.NodeSpec) ([]*resourceapi.ResourceSlice, error) {
	inv, err := Inventory(n)
	if err != nil {
		return nil, err
	}
	pool, err := driver.Render(inv, driver.RenderOptions{MIG: driver.MIGNone, NoGroups: true})
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Name, err)
	}
	return pool.ResourceSlices(n.Name, 1), nil
}

// Allocator is a reproduction.Binder backed by the real structured allocator, one
// allocation.State per node holding only that node's slices (what kube-scheduler's
// allocator does for one candidate node, without paying for the other 1212).
type Allocator struct {
	Mode   Mode
	states map[string]*allocation.State
	uid    int64
	ctx    context.Context
}

// NewAllocator renders every node and builds its allocation state.
func NewAllocator(ctx context.Context, nodes []placement.NodeSpec, mode Mode) (*Allocator, error) {
	if !slices.Contains(Modes, mode) {
		return nil, fmt.Errorf("mode %q: accepted values are %s, %s", mode, Reproduction, DRA)
	}
	classes, err := deployments.DeviceClasses()
	if err != nil {
		return nil, err
	}
	a := &Allocator{Mode: mode, states: make(map[string]*allocation.State, len(nodes)), ctx: ctx}
	for _, n := range nodes {
		rs, err := Slices(n)
		if err != nil {
			return nil, err
		}
		a.states[n.Name] = allocation.New(classes, rs)
	}
	return a, nil
}

// Bind asks the allocator for the pod's claim on the node; in reproduction mode the
// claim pins the policy's GPUs.
func (a *Allocator) Bind(n *placement.Node, p *placement.Pod, c placement.Choice) ([]int, error) {
	if p.GPUs == 0 {
		return nil, nil
	}
	var pin []int
	if a.Mode == Reproduction {
		pin = c.GPUs
	}
	a.uid++
	claim, err := Claim(p, pin, a.uid)
	if err != nil {
		return nil, err
	}
	st := a.states[n.Name]
	if st == nil {
		return nil, fmt.Errorf("node %s has no slices", n.Name)
	}
	results, err := st.AllocateAndCommit(a.ctx, n.Name, claim)
	if errors.Is(err, allocation.ErrUnsatisfiable) {
		return nil, reproduction.ErrRefused
	}
	if err != nil {
		return nil, err
	}
	gpus := make([]int, 0, p.GPUs)
	for _, d := range results[0].Devices.Results {
		i, err := gpuIndex(d.Device)
		if err != nil {
			return nil, err
		}
		gpus = append(gpus, i)
	}
	slices.Sort(gpus)
	return gpus, nil
}

// gpuIndex parses gpu-<i> and gpu-<i>-share.
func gpuIndex(device string) (int, error) {
	s := strings.TrimSuffix(strings.TrimPrefix(device, "gpu-"), "-share")
	i, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("device %q is neither gpu-<i> nor gpu-<i>-share", device)
	}
	return i, nil
}

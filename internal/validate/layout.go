package validate

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/discover"
	"github.com/gpudra/gpudra/driver/miglayout"
	"github.com/gpudra/gpudra/driver/simulated"
	"github.com/gpudra/gpudra/kubeletplugin"
	"github.com/gpudra/gpudra/queueing/network"
)

// Node is a node MIG layouts are checked against: its GPUs as discovery sees them, and
// what layout entries select them by.
type Node struct {
	// Name says where the node came from ("dgx-h100").
	Name string
	GPUs []NodeGPU
}

// NodeGPU is one GPU of a Node.
type NodeGPU struct {
	GPU      driver.GPU
	Selector miglayout.GPU
}

// OpenNode discovers the simulated node of profile (a built-in profile name or a profile
// file, as --nvml=sim:<profile> takes) for checking layouts against.
func OpenNode(profile string) (*Node, error) {
	b, err := simulated.Open(profile, "validate")
	if err != nil {
		return nil, err
	}
	defer b.Close()
	inv, err := discover.Discover(b)
	if err != nil {
		return nil, err
	}
	n := &Node{Name: profile}
	for _, g := range inv.GPUs {
		sel := miglayout.GPU{Index: g.Index, ProductName: g.ProductName}
		dev, ret := b.NVML.DeviceGetHandleByUUID(g.UUID)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %d: DeviceGetHandleByUUID: %v", g.Index, ret)
		}
		pci, ret := dev.GetPciInfo()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %d: GetPciInfo: %v", g.Index, ret)
		}
		sel.PCIDeviceID, sel.PCISubsystemID = pci.PciDeviceId, pci.PciSubSystemId
		n.GPUs = append(n.GPUs, NodeGPU{GPU: g, Selector: sel})
	}
	return n, nil
}

// checkMIGLayouts parses a layout file with the plugin's parser and, with a node, checks
// that each layout's device indexes are the node's and that every GPU each layout selects
// can be partitioned as it says, with the plugin's own planner.
func checkMIGLayouts(doc []byte, node *Node, layout string) []Problem {
	f, err := miglayout.Parse(doc)
	if err != nil {
		return []Problem{{Message: err.Error()}}
	}
	names := f.Names()
	if layout != "" {
		if _, err := f.Layout(layout); err != nil {
			return []Problem{{Path: "mig-configs", Message: err.Error()}}
		}
		names = []string{layout}
	}
	if node == nil {
		return nil
	}
	indexes := make([]int, 0, len(node.GPUs))
	for _, g := range node.GPUs {
		indexes = append(indexes, g.GPU.Index)
	}
	var problems []Problem
	for _, name := range names {
		entries := f.Layouts[name]
		for k, e := range entries {
			for j, i := range e.Devices {
				if !slices.Contains(indexes, i) {
					problems = append(problems, Problem{
						Path:    fmt.Sprintf("mig-configs.%s[%d].devices[%d]", name, k, j),
						Message: fmt.Sprintf("node %s has no GPU %d; its GPU indexes are %s", node.Name, i, intList(indexes)),
					})
				}
			}
		}
		selected := 0
		for _, g := range node.GPUs {
			e, ok := miglayout.Select(entries, g.Selector)
			if !ok {
				continue
			}
			selected++
			if err := planGPU(&g.GPU, e); err != nil {
				problems = append(problems, Problem{Path: "mig-configs." + name, Message: fmt.Sprintf("on node %s: %v", node.Name, err)})
			}
		}
		if selected == 0 && layout != "" {
			// The layout a node's label names changes nothing there: a mistake, although a
			// file for many models has layouts that select none of one node's GPUs.
			problems = append(problems, Problem{Path: "mig-configs." + name, Message: fmt.Sprintf("selects none of node %s's GPUs (%s)", node.Name, describeGPUs(node))})
		}
	}
	return problems
}

// planGPU asks the plugin's planner whether g can hold e, after refusing counts no GPU
// can hold (each MIG device takes at least one memory slice), so that the planner never
// lists more instances than a GPU has slices.
func planGPU(g *driver.GPU, e miglayout.Entry) error {
	if e.MIGEnabled && g.MIG != nil {
		total := 0
		for _, n := range e.MIGDevices {
			if n < 0 || n > g.MIG.MemorySlices || total+n > g.MIG.MemorySlices {
				return fmt.Errorf("GPU %d (%s) cannot hold %s: more MIG devices than its %d memory slices", g.Index, g.ProductName, counts(e.MIGDevices), g.MIG.MemorySlices)
			}
			total += n
		}
	}
	return kubeletplugin.CheckMIGLayoutEntry(g, e)
}

func counts(m map[string]int) string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%d×%s", m[name], name))
	}
	return strings.Join(out, " ")
}

func intList(list []int) string {
	out := make([]string, len(list))
	for i, v := range list {
		out[i] = fmt.Sprint(v)
	}
	return strings.Join(out, ", ")
}

// checkTopology parses a network topology file with the controller's parser.
func checkTopology(doc []byte) []Problem {
	if _, err := network.ParseFile(doc); err != nil {
		return []Problem{{Message: err.Error()}}
	}
	return nil
}

// describeGPUs names a node's GPU models as layouts select them: "8× NVIDIA H100 80GB
// HBM3 (0x233010DE)".
func describeGPUs(n *Node) string {
	count := map[string]int{}
	var order []string
	for _, g := range n.GPUs {
		model := fmt.Sprintf("%s (0x%08X)", g.Selector.ProductName, g.Selector.PCIDeviceID)
		if count[model] == 0 {
			order = append(order, model)
		}
		count[model]++
	}
	out := make([]string, len(order))
	for i, m := range order {
		out[i] = fmt.Sprintf("%d× %s", count[m], m)
	}
	return strings.Join(out, ", ")
}

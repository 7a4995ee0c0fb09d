package driver

import (
	"slices"

	"github.com/gpudra/gpudra/topology"
)

// AddGPUs appends GPUs another backend found (AMD and Hygon GPUs from the KFD topology,
// indexed from 0) to inv, after its own: their indices, and their XGMI peers, move past
// the highest index inv has. The NVLink graph and the PCIe matrix grow to cover them (no
// NVLinks; PCIe distance from their PCIe roots and NUMA nodes). Unreadable GPUs are added
// with their indices moved the same way.
func (inv *Inventory) AddGPUs(gpus []GPU, unreadable []UnreadableGPU) {
	base := 0
	for _, g := range inv.GPUs {
		base = max(base, g.Index+1)
	}
	for _, u := range inv.Unreadable {
		base = max(base, u.Index+1)
	}
	old := len(inv.GPUs)
	for _, g := range gpus {
		g.Index += base
		if g.KFD != nil {
			k := *g.KFD
			k.XGMIPeers = slices.Clone(k.XGMIPeers)
			for i := range k.XGMIPeers {
				k.XGMIPeers[i] += base
			}
			g.KFD = &k
		}
		inv.GPUs = append(inv.GPUs, g)
	}
	for _, u := range unreadable {
		u.Index += base
		inv.Unreadable = append(inv.Unreadable, u)
	}
	n := len(inv.GPUs)
	graph := topology.NewNVLinkGraph(n)
	for i := range min(old, inv.NVLink.Len()) {
		graph.SwitchLinks[i] = inv.NVLink.SwitchLinks[i]
		copy(graph.Links[i], inv.NVLink.Links[i])
	}
	inv.NVLink = graph
	pcie := make([][]PCIeLevel, n)
	for i := range pcie {
		pcie[i] = make([]PCIeLevel, n)
		for j := range pcie[i] {
			if i < old && j < old && i < len(inv.PCIe) && j < len(inv.PCIe[i]) {
				pcie[i][j] = inv.PCIe[i][j]
				continue
			}
			pcie[i][j] = pcieDistance(&inv.GPUs[i], &inv.GPUs[j])
		}
	}
	inv.PCIe = pcie
}

// pcieDistance is how close two GPUs are on PCIe as far as their PCIe roots and NUMA
// nodes tell: the same device, the same root, the same NUMA node, or across.
func pcieDistance(a, b *GPU) PCIeLevel {
	switch {
	case a.PCIBusID == b.PCIBusID:
		return PCIeSame
	case a.PCIeRoot != "" && a.PCIeRoot == b.PCIeRoot:
		return PCIeHostBridge
	case a.NUMANode != nil && b.NUMANode != nil && *a.NUMANode == *b.NUMANode:
		return PCIeNUMANode
	default:
		return PCIeSystem
	}
}

package driver

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// WriteTopology prints the GPU topology matrix the way `nvidia-smi topo -m` does:
// NV<n> for n NVLinks (direct or through NVSwitch), else the closest PCIe level,
// followed by each GPU's NUMA node and PCIe root.
func WriteTopology(w io.Writer, inv *Inventory) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := []string{""}
	for _, g := range inv.GPUs {
		header = append(header, fmt.Sprintf("GPU%d", g.Index))
	}
	header = append(header, "NUMA", "PCIe root")
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for i, g := range inv.GPUs {
		row := []string{fmt.Sprintf("GPU%d", g.Index)}
		for j := range inv.GPUs {
			switch {
			case i == j:
				row = append(row, "X")
			case g.KFD != nil && slices.Contains(g.KFD.XGMIPeers, inv.GPUs[j].Index):
				row = append(row, "XGMI")
			case inv.NVLink.PairLinks(i, j) > 0:
				row = append(row, fmt.Sprintf("NV%d", inv.NVLink.PairLinks(i, j)))
			case inv.PCIe != nil:
				row = append(row, string(inv.PCIe[i][j]))
			default:
				row = append(row, "SYS")
			}
		}
		numa := "N/A"
		if g.NUMANode != nil {
			numa = strconv.Itoa(*g.NUMANode)
		}
		row = append(row, numa, orNA(g.PCIeRoot))
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\nLegend: X = self, NV# = # NVLinks (%s fabric), PIX = one PCIe switch, PXB = several PCIe switches,\n        PHB = PCIe host bridge, NODE = within a NUMA node, SYS = across NUMA nodes\n", inv.NVLink.Fabric())
	if err == nil && slices.ContainsFunc(inv.GPUs, func(g GPU) bool { return g.KFD != nil && len(g.KFD.XGMIPeers) > 0 }) {
		_, err = fmt.Fprintln(w, "        XGMI = a direct XGMI link (AMD)")
	}
	return err
}

func orNA(s string) string {
	if s == "" {
		return "N/A"
	}
	return s
}

// WriteInventory prints the GPUs, their MIG options and what the node publishes.
func WriteInventory(w io.Writer, inv *Inventory, pool *Pool) error {
	if inv.DriverVersion != "" {
		fmt.Fprintf(w, "Backend %s, driver %s, CUDA %s\n\n", inv.Backend, inv.DriverVersion, inv.CUDADriverVersion)
	} else {
		fmt.Fprintf(w, "Backend %s\n\n", inv.Backend)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GPU\tPRODUCT\tARCH\tCC\tMEMORY\tSMs\tBUS ID\tMIG\tUUID")
	for _, g := range inv.GPUs {
		mig := "-"
		if g.MIG != nil {
			mig = "capable"
			if g.MIG.Enabled {
				mig = "enabled"
			}
		}
		arch, cc := g.Architecture, g.CUDAComputeCapability
		if k := g.KFD; k != nil {
			// AMD: the ISA, and the partition instead of MIG.
			arch, cc = k.GFXTarget, "-"
			if k.Partitions > 1 {
				mig = fmt.Sprintf("%s %d/%d", orNA(k.ComputePartition), k.Partition+1, k.Partitions)
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%dMiB\t%d\t%s\t%s\t%s\n", g.Index, g.ProductName, arch, cc,
			g.MemoryBytes>>20, g.Multiprocessors, g.PCIBusID, mig, g.UUID)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if g := firstMIG(inv); g != nil {
		fmt.Fprintf(w, "\nMIG profiles (GPU %d, %d memory slices):\n", g.Index, g.MIG.MemorySlices)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  PROFILE\tMEMORY\tSMs\tPLACEMENTS (start:size)")
		for _, p := range g.MIG.Profiles {
			var pl []string
			for _, x := range p.Placements {
				pl = append(pl, fmt.Sprintf("%d:%d", x.Start, x.Size))
			}
			fmt.Fprintf(tw, "  %s\t%dMiB\t%d\t%s\n", p.Name, p.MemoryBytes>>20, p.Multiprocessors, strings.Join(pl, " "))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if groups := inv.NVLink.Groups(); len(groups) > 0 {
		fmt.Fprintf(w, "\nNVLink groups (%s):", inv.NVLink.Fabric())
		for _, gr := range groups {
			fmt.Fprintf(w, " {%s}x%d", strings.Join(strings.Split(gr.Name(), "-"), ","), gr.MinLinks)
		}
		fmt.Fprintln(w)
	}
	if groups := inv.XGMIGroups(); len(groups) > 0 {
		fmt.Fprint(w, "\nXGMI groups:")
		for _, gr := range groups {
			fmt.Fprintf(w, " {%s}", topology.JoinIndices(inv.indices(gr), ","))
		}
		fmt.Fprintln(w)
	}
	counts := map[string]int{}
	devices, counterSets := 0, 0
	for _, s := range pool.Slices {
		counterSets += len(s.SharedCounters)
		for _, d := range s.Devices {
			devices++
			if t := api.DeviceType(&d); t != "" {
				counts[t]++
			}
		}
	}
	names := make([]string, 0, len(counts))
	for k := range counts {
		names = append(names, k)
	}
	// Most devices first, then by name.
	sort.Slice(names, func(i, j int) bool {
		if counts[names[i]] != counts[names[j]] {
			return counts[names[i]] > counts[names[j]]
		}
		return names[i] < names[j]
	})
	kinds := make([]string, len(names))
	for i, k := range names {
		kinds[i] = fmt.Sprintf("%d %s", counts[k], k)
	}
	sets := fmt.Sprintf("%d counter sets keep", counterSets)
	if counterSets == 1 {
		sets = "1 counter set keeps"
	}
	_, err := fmt.Fprintf(w, "\nPublishes %d devices (%s) in %d ResourceSlices; %s them exclusive.\n",
		devices, strings.Join(kinds, ", "), len(pool.Slices), sets)
	return err
}

func firstMIG(inv *Inventory) *GPU {
	for k := range inv.GPUs {
		if inv.GPUs[k].MIG != nil {
			return &inv.GPUs[k]
		}
	}
	return nil
}

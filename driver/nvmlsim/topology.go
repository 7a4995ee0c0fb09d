package nvmlsim

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// pciAddr is a PCI domain:bus:device.function address.
type pciAddr struct{ domain, bus, device, function uint32 }

// String is the sysfs form, "0000:1a:00.0".
func (a pciAddr) String() string {
	return fmt.Sprintf("%04x:%02x:%02x.%x", a.domain, a.bus, a.device, a.function)
}

// pciInfo is the address as NVML reports it.
func (a pciAddr) pciInfo(deviceID uint32) nvml.PciInfo {
	info := nvml.PciInfo{Domain: a.domain, Bus: a.bus, Device: a.device, PciDeviceId: deviceID}
	copyCString(info.BusId[:], fmt.Sprintf("%08X:%02X:%02X.%X", a.domain, a.bus, a.device, a.function))
	copyCString(info.BusIdLegacy[:], fmt.Sprintf("%04X:%02X:%02X.%X", a.domain, a.bus, a.device, a.function))
	return info
}

func copyCString(dst []int8, s string) {
	for i := 0; i < len(s) && i < len(dst)-1; i++ {
		dst[i] = int8(s[i])
	}
}

// pcieRoot is a root complex: sysfs name pci<domain>:<bus>.
type pcieRoot struct {
	name        string
	domain, bus uint32
	numaNode    int
	lastBus     uint32 // the highest bus number used below it
}

// gpuSlot is where one GPU sits in the PCIe tree.
type gpuSlot struct {
	root     int // index into node.roots
	pcieSw   int // global PCIe switch number, -1 when on a root port
	addr     pciAddr
	bridges  []pciAddr // root port, and switch ports, from the root down
	numaNode int
}

// maxRootPorts is how many root ports (PCI devices 1..31 on the root's bus) a root
// complex has.
const maxRootPorts = 31

var rootNameRE = regexp.MustCompile(`^pci([0-9a-f]{4}):([0-9a-f]{2})$`)

// resolvePCIe checks every GPU sits in exactly one root and assigns bus numbers:
// each switch or directly attached GPU, in order of its first GPU, takes the next
// root port and the next free buses below the root's own bus.
func (p *Profile) resolvePCIe(n *node, errs *fieldErrors) {
	if len(p.PCIe.Roots) == 0 {
		errs.add("pcie.roots", "required: list the PCIe root complexes (name, numaNode) and their GPUs")
		return
	}
	n.gpus = make([]gpuSlot, n.count)
	seen := make([]string, n.count)
	names := map[string]int{}
	nextSwitch := 0
	for ri, r := range p.PCIe.Roots {
		path := fmt.Sprintf("pcie.roots[%d]", ri)
		m := rootNameRE.FindStringSubmatch(r.Name)
		if m == nil {
			errs.add(path+".name", "must be a root complex name \"pci<domain>:<bus>\" in lower-case hex such as pci0000:17, got %q", r.Name)
			continue
		}
		if prev, dup := names[r.Name]; dup {
			errs.add(path+".name", "%q is already pcie.roots[%d]", r.Name, prev)
			continue
		}
		names[r.Name] = ri
		if r.NUMANode == nil {
			errs.add(path+".numaNode", "required, 0..1023")
			continue
		}
		if *r.NUMANode < 0 || *r.NUMANode > 1023 {
			errs.add(path+".numaNode", "must be 0..1023, got %d", *r.NUMANode)
			continue
		}
		domain, _ := strconv.ParseUint(m[1], 16, 32)
		bus, _ := strconv.ParseUint(m[2], 16, 32)
		root := pcieRoot{name: r.Name, domain: uint32(domain), bus: uint32(bus), numaNode: *r.NUMANode}

		// Groups of GPUs sharing a switch (sw >= 0) or alone on a root port (sw = -1).
		type group struct {
			gpus []int
			sw   bool
		}
		var groups []group
		claim := func(g int, where string) bool {
			if g < 0 || g >= n.count {
				errs.add(where, "GPU %d does not exist; GPUs are 0..%d", g, n.count-1)
				return false
			}
			if seen[g] != "" {
				errs.add(where, "GPU %d is already in %s; every GPU must be in exactly one root", g, seen[g])
				return false
			}
			seen[g] = where
			return true
		}
		for i, g := range r.GPUs {
			if claim(g, fmt.Sprintf("%s.gpus[%d]", path, i)) {
				groups = append(groups, group{gpus: []int{g}})
			}
		}
		for si, members := range r.Switches {
			if len(members) == 0 {
				errs.add(fmt.Sprintf("%s.switches[%d]", path, si), "a switch needs at least one GPU")
			}
			var ok []int
			for i, g := range members {
				if claim(g, fmt.Sprintf("%s.switches[%d][%d]", path, si, i)) {
					ok = append(ok, g)
				}
			}
			if len(ok) > 0 {
				groups = append(groups, group{gpus: ok, sw: true})
			}
		}
		slices.SortStableFunc(groups, func(a, b group) int { return slices.Min(a.gpus) - slices.Min(b.gpus) })

		next := root.bus + 1
		for port, g := range groups {
			rootPort := pciAddr{domain: root.domain, bus: root.bus, device: uint32(port + 1)}
			if !g.sw {
				n.gpus[g.gpus[0]] = gpuSlot{root: ri, pcieSw: -1, addr: pciAddr{domain: root.domain, bus: next},
					bridges: []pciAddr{rootPort}, numaNode: root.numaNode}
				next++
				continue
			}
			upstream := pciAddr{domain: root.domain, bus: next}
			for i, gi := range g.gpus {
				downstream := pciAddr{domain: root.domain, bus: next + 1, device: uint32(i)}
				n.gpus[gi] = gpuSlot{root: ri, pcieSw: nextSwitch, addr: pciAddr{domain: root.domain, bus: next + 2 + uint32(i)},
					bridges: []pciAddr{rootPort, upstream, downstream}, numaNode: root.numaNode}
			}
			nextSwitch++
			next += 2 + uint32(len(g.gpus))
		}
		root.lastBus = next - 1
		if len(groups) > maxRootPorts {
			errs.add(path, "%d PCIe switches and directly attached GPUs, but a root complex has at most %d root ports; spread them over more roots", len(groups), maxRootPorts)
			continue
		}
		if root.lastBus > 0xff {
			errs.add(path+".name", "its switches and GPUs need buses 0x%02x..0x%02x, but bus numbers end at 0xff; pick a lower bus", root.bus, root.lastBus)
			continue
		}
		for oi, other := range n.roots {
			if other.domain == root.domain && other.bus <= root.lastBus && root.bus <= other.lastBus {
				errs.add(path+".name", "its buses 0x%02x..0x%02x overlap those of %s (0x%02x..0x%02x); space the roots' bus numbers further apart",
					root.bus, root.lastBus, p.PCIe.Roots[oi].Name, other.bus, other.lastBus)
			}
		}
		n.roots = append(n.roots, root)
	}
	for g, where := range seen {
		if where == "" && len(errs.list) == 0 {
			errs.add("pcie.roots", "GPU %d is in no root; every GPU 0..%d must be in exactly one root's gpus or switches", g, n.count-1)
		}
	}
}

// commonAncestor is the closest PCIe/NUMA level two GPUs share, as NVML reports it.
func commonAncestor(a, b gpuSlot, same bool) nvml.GpuTopologyLevel {
	switch {
	case same:
		return nvml.TOPOLOGY_INTERNAL
	case a.pcieSw >= 0 && a.pcieSw == b.pcieSw:
		return nvml.TOPOLOGY_SINGLE
	case a.root == b.root:
		return nvml.TOPOLOGY_HOSTBRIDGE
	case a.numaNode == b.numaNode:
		return nvml.TOPOLOGY_NODE
	}
	return nvml.TOPOLOGY_SYSTEM
}

// nvlinkFabric is every GPU's links: links[gpu][link] is the remote end.
type nvlinkFabric struct {
	linksPerGPU    int
	links          [][]linkEnd
	switches       int
	switchDeviceID uint32
}

// linkEnd is the remote end of one link: a GPU, an NVSwitch, or nothing (unused).
type linkEnd struct {
	gpu      int // -1 unless a GPU
	nvswitch int // -1 unless an NVSwitch
}

func (e linkEnd) used() bool { return e.gpu >= 0 || e.nvswitch >= 0 }

// matrixFabric numbers each GPU's links in order of peer GPU: GPU i's first
// counts[i][0] links go to GPU 0, the next ones to GPU 1, and so on.
func matrixFabric(counts [][]int, linksPerGPU int, errs *fieldErrors) nvlinkFabric {
	most := 0
	for _, row := range counts {
		sum := 0
		for _, c := range row {
			sum += c
		}
		most = max(most, sum)
	}
	if linksPerGPU == 0 {
		linksPerGPU = most
	}
	f := nvlinkFabric{linksPerGPU: linksPerGPU, links: make([][]linkEnd, len(counts))}
	for i, row := range counts {
		sum := 0
		for _, c := range row {
			sum += c
		}
		if sum > linksPerGPU || sum > nvml.NVLINK_MAX_LINKS {
			errs.add(fmt.Sprintf("nvlink.matrix[%d]", i), "GPU %d has %d links but linksPerGPU is %d (at most %d)", i, sum, linksPerGPU, nvml.NVLINK_MAX_LINKS)
			continue
		}
		for j, c := range row {
			for range c {
				f.links[i] = append(f.links[i], linkEnd{gpu: j, nvswitch: -1})
			}
		}
		for len(f.links[i]) < linksPerGPU {
			f.links[i] = append(f.links[i], linkEnd{gpu: -1, nvswitch: -1})
		}
	}
	return f
}

// switchFabric spreads each GPU's links over the switches in contiguous blocks:
// link l goes to switch l*switches/links.
func switchFabric(gpus, switches, linksPerGPU int, deviceID uint32) nvlinkFabric {
	f := nvlinkFabric{linksPerGPU: linksPerGPU, links: make([][]linkEnd, gpus), switches: switches, switchDeviceID: deviceID}
	for g := range f.links {
		for l := range linksPerGPU {
			f.links[g] = append(f.links[g], linkEnd{gpu: -1, nvswitch: l * switches / linksPerGPU})
		}
	}
	return f
}

// switchAddrs gives the NVSwitches bus numbers from 0xff down, skipping the roots' buses.
func switchAddrs(n *node) []pciAddr {
	var addrs []pciAddr
	domain := uint32(0)
	if len(n.roots) > 0 {
		domain = n.roots[0].domain
	}
	for bus := uint32(0xff); bus > 0 && len(addrs) < n.nvlink.switches; bus-- {
		taken := false
		for _, r := range n.roots {
			taken = taken || (r.domain == domain && r.bus <= bus && bus <= r.lastBus)
		}
		if !taken {
			addrs = append(addrs, pciAddr{domain: domain, bus: bus})
		}
	}
	return addrs
}

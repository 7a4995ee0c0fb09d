package nvmlsim

import (
	"fmt"
	"io/fs"
	"path"
	"strings"
	"testing/fstest"
)

// cpusPerNUMANode is how many CPUs each simulated NUMA node (one socket each) has.
const cpusPerNUMANode = 16

// newSysFS builds the /sys view of the node (paths relative to /sys): each GPU's PCI
// device below its root complex and switch ports, the bus/pci/devices symlinks, and
// the NUMA nodes with their distances and CPUs. It is what
// k8s.io/dynamic-resource-allocation/deviceattribute reads for pcieRoot and numaNode.
func newSysFS(n *node) fs.ReadLinkFS {
	sys := fstest.MapFS{}
	file := func(name, content string) { sys[name] = &fstest.MapFile{Data: []byte(content + "\n"), Mode: 0o444} }
	link := func(name, target string) {
		sys[name] = &fstest.MapFile{Data: []byte(target), Mode: fs.ModeSymlink | 0o777}
	}

	for _, g := range n.gpus {
		dir := path.Join("devices", n.roots[g.root].name)
		for _, b := range g.bridges {
			dir = path.Join(dir, b.String())
			file(path.Join(dir, "class"), "0x060400")
		}
		dir = path.Join(dir, g.addr.String())
		file(path.Join(dir, "numa_node"), fmt.Sprint(g.numaNode))
		file(path.Join(dir, "vendor"), fmt.Sprintf("0x%04x", n.gpu.PciDeviceId&0xffff))
		file(path.Join(dir, "device"), fmt.Sprintf("0x%04x", n.gpu.PciDeviceId>>16))
		file(path.Join(dir, "class"), "0x030200")
		link(path.Join("bus", "pci", "devices", g.addr.String()), path.Join("..", "..", "..", dir))
	}

	nodes := 0
	for _, r := range n.roots {
		nodes = max(nodes, r.numaNode+1)
	}
	file("devices/system/node/online", fmt.Sprintf("0-%d", nodes-1))
	for node := range nodes {
		distances := make([]string, nodes)
		for other := range distances {
			distances[other] = "21"
			if other == node {
				distances[other] = "10"
			}
		}
		dir := fmt.Sprintf("devices/system/node/node%d", node)
		first := node * cpusPerNUMANode
		file(dir+"/distance", strings.Join(distances, " "))
		file(dir+"/cpulist", fmt.Sprintf("%d-%d", first, first+cpusPerNUMANode-1))
		for cpu := first; cpu < first+cpusPerNUMANode; cpu++ {
			cpuDir := fmt.Sprintf("devices/system/cpu/cpu%d", cpu)
			file(cpuDir+"/topology/physical_package_id", fmt.Sprint(node))
			link(fmt.Sprintf("%s/node%d", cpuDir, node), "../../node/node"+fmt.Sprint(node))
		}
	}
	return sys
}

package kfd

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/gpudra/gpudra/driver"
)

// Paths below the sysfs root (the host's /sys).
const (
	// TopologyNodes holds one directory per KFD node (CPUs and GPUs).
	TopologyNodes = "class/kfd/kfd/topology/nodes"
	// DRMClass holds the DRM cards and render nodes.
	DRMClass = "class/drm"
)

// PCI vendor ids of the GPUs KFD shows, as vendor_id prints them.
const (
	PCIVendorAMD   = 0x1002 // 4098
	PCIVendorHygon = 0x1d94 // 7572
)

// Link types of io_links and p2p_links.
const (
	LinkTypePCIe = 2
	LinkTypeXGMI = 11
)

// ErrNoTopology is wrapped when the sysfs root has no KFD topology.
var ErrNoTopology = errors.New("no KFD topology")

// Result is what discovery found: the readable GPUs, indexed from 0 in KFD node order
// (the order ROCm enumerates them in), and the GPU nodes it could not read.
type Result struct {
	GPUs       []driver.GPU
	Unreadable []driver.UnreadableGPU
}

// node is one KFD topology GPU node as read from sysfs.
type node struct {
	id    int
	gpuID uint64
	props Properties
	mem   uint64
	links []link
}

type link struct{ typ, to, weight uint64 }

// Discover reads the AMD and Hygon GPUs of the sysfs tree sys (rooted like /sys). CPU
// nodes are skipped. A GPU node that cannot be read or makes no sense goes in Unreadable
// with the file and value at fault, and its GPU is not published; a tree without a KFD
// topology is an error wrapping ErrNoTopology.
func Discover(sys fs.FS) (*Result, error) {
	entries, err := fs.ReadDir(sys, TopologyNodes)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v (is the amdgpu driver loaded?)", ErrNoTopology, TopologyNodes, err)
	}
	var ids []int
	for _, e := range entries {
		if id, err := strconv.Atoi(e.Name()); err == nil && id >= 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	res := &Result{}
	var nodes []*node
	for _, id := range ids {
		n, err := readNode(sys, id)
		if err != nil {
			res.Unreadable = append(res.Unreadable, driver.UnreadableGPU{Index: id, Call: "kfd node " + strconv.Itoa(id), Reason: err.Error()})
			continue
		}
		if n != nil {
			nodes = append(nodes, n)
		}
	}
	indexOf := map[int]int{} // KFD node id → GPU index
	for _, n := range nodes {
		g, err := gpuOf(sys, n)
		if err != nil {
			res.Unreadable = append(res.Unreadable, driver.UnreadableGPU{Index: n.id, Call: "kfd node " + strconv.Itoa(n.id), Reason: err.Error()})
			continue
		}
		g.Index = len(res.GPUs)
		indexOf[n.id] = g.Index
		res.GPUs = append(res.GPUs, *g)
	}
	partitions(res.GPUs)
	for _, n := range nodes {
		k, ok := indexOf[n.id]
		if !ok {
			continue
		}
		for _, l := range n.links {
			if peer, ok := indexOf[int(l.to)]; ok && l.typ == LinkTypeXGMI && peer != k && !slices.Contains(res.GPUs[k].KFD.XGMIPeers, peer) {
				res.GPUs[k].KFD.XGMIPeers = append(res.GPUs[k].KFD.XGMIPeers, peer)
			}
		}
		slices.Sort(res.GPUs[k].KFD.XGMIPeers)
	}
	return res, nil
}

// readFile reads a small sysfs file.
func readFile(sys fs.FS, name string) ([]byte, error) {
	f, err := sys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPropertiesBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return data, nil
}

func readProperties(sys fs.FS, name string) (Properties, error) {
	data, err := readFile(sys, name)
	if err != nil {
		return nil, err
	}
	return ParseProperties(name, data)
}

// readNode reads KFD node id; nil for a CPU node.
func readNode(sys fs.FS, id int) (*node, error) {
	dir := path.Join(TopologyNodes, strconv.Itoa(id))
	file := path.Join(dir, "properties")
	props, err := readProperties(sys, file)
	if err != nil {
		return nil, err
	}
	if props["simd_count"] == 0 {
		return nil, nil // a CPU node
	}
	n := &node{id: id, props: props}
	gpuIDFile := path.Join(dir, "gpu_id")
	data, err := readFile(sys, gpuIDFile)
	if err != nil {
		return nil, err
	}
	if n.gpuID, err = strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64); err != nil {
		return nil, fmt.Errorf("%s: %q is not an unsigned decimal integer", gpuIDFile, strings.TrimSpace(string(data)))
	}
	if n.gpuID == 0 {
		return nil, fmt.Errorf("%s is 0 (a CPU's) but %s has simd_count %d", gpuIDFile, file, props["simd_count"])
	}
	if n.mem, err = frameBuffer(sys, dir); err != nil {
		return nil, err
	}
	for _, kind := range []string{"io_links", "p2p_links"} {
		ls, err := fs.ReadDir(sys, path.Join(dir, kind))
		if err != nil {
			continue // older kernels have no p2p_links
		}
		for _, e := range ls {
			lp := path.Join(dir, kind, e.Name(), "properties")
			p, err := readProperties(sys, lp)
			if err != nil {
				return nil, err
			}
			typ, err := p.need(lp, "type")
			if err != nil {
				return nil, err
			}
			to, err := p.need(lp, "node_to")
			if err != nil {
				return nil, err
			}
			n.links = append(n.links, link{typ: typ, to: to, weight: p["weight"]})
		}
	}
	return n, nil
}

// Frame buffer heaps of mem_banks (HSA_HEAPTYPE_FRAME_BUFFER_PUBLIC and _PRIVATE).
const (
	heapFrameBufferPublic  = 1
	heapFrameBufferPrivate = 2
)

// frameBuffer sums the node's device memory banks; 0 when it lists none.
func frameBuffer(sys fs.FS, dir string) (uint64, error) {
	banks, err := fs.ReadDir(sys, path.Join(dir, "mem_banks"))
	if err != nil {
		return 0, nil
	}
	var total uint64
	for _, b := range banks {
		file := path.Join(dir, "mem_banks", b.Name(), "properties")
		p, err := readProperties(sys, file)
		if err != nil {
			return 0, err
		}
		if h := p["heap_type"]; h == heapFrameBufferPublic || h == heapFrameBufferPrivate {
			size, err := p.need(file, "size_in_bytes")
			if err != nil {
				return 0, err
			}
			if total+size < total {
				return 0, fmt.Errorf("%s: size_in_bytes %d overflows the node's memory", file, size)
			}
			total += size
		}
	}
	return total, nil
}

// gpuOf turns a GPU node into a driver.GPU (Index unset).
func gpuOf(sys fs.FS, n *node) (*driver.GPU, error) {
	file := path.Join(TopologyNodes, strconv.Itoa(n.id), "properties")
	p := n.props
	g := &driver.GPU{KFD: &driver.KFDInfo{Node: n.id, GPUID: n.gpuID, Card: -1, Partitions: 1}}
	vendor, err := p.need(file, "vendor_id")
	if err != nil {
		return nil, err
	}
	switch vendor {
	case PCIVendorAMD:
		g.Vendor = driver.VendorAMD
	case PCIVendorHygon:
		g.Vendor = driver.VendorHygon
	default:
		return nil, fmt.Errorf("%s: vendor_id %d: accepted values are %d (AMD) and %d (Hygon)", file, vendor, PCIVendorAMD, PCIVendorHygon)
	}
	gfx, err := p.need(file, "gfx_target_version")
	if err != nil {
		return nil, err
	}
	var ok bool
	if g.KFD.GFXTarget, ok = GFXTarget(gfx); !ok {
		return nil, fmt.Errorf("%s: gfx_target_version %d is not <major><minor:2 digits><stepping:2 digits> with minor and stepping below 16", file, gfx)
	}
	if spc := p["simd_per_cu"]; spc > 0 {
		g.Multiprocessors = int(min(p["simd_count"]/spc, 1<<20))
	}
	minor, err := p.need(file, "drm_render_minor")
	if err != nil {
		return nil, err
	}
	if minor < 128 || minor > 255 {
		return nil, fmt.Errorf("%s: drm_render_minor %d: render nodes are 128 to 255", file, minor)
	}
	g.KFD.RenderMinor = int(minor)
	loc, err := p.need(file, "location_id")
	if err != nil {
		return nil, err
	}
	if loc > 0xffff || p["domain"] > 0xffff {
		return nil, fmt.Errorf("%s: location_id %d or domain %d is out of range (bus<<8 | device<<3 | function, 16 bits each)", file, loc, p["domain"])
	}
	g.PCIBusID = fmt.Sprintf("%04x:%02x:%02x.%x", p["domain"], loc>>8, (loc>>3)&0x1f, loc&7)
	if card := int(minor) - 128; exists(sys, path.Join(DRMClass, "card"+strconv.Itoa(card))) {
		g.KFD.Card = card
	}
	dev := path.Join(DRMClass, "card"+strconv.Itoa(g.KFD.Card), "device")
	if g.KFD.Card < 0 {
		dev = path.Join(DRMClass, "renderD"+strconv.Itoa(int(minor)), "device")
	}
	if id := p["unique_id"]; id != 0 {
		g.UUID = fmt.Sprintf("GPU-%016x", id)
		g.KFD.WholeUUID = true
	} else {
		g.UUID = fmt.Sprintf("GPU-kfd-%d", n.gpuID)
	}
	if h := p["hive_id"]; h != 0 {
		g.KFD.XGMIHive = fmt.Sprintf("%016x", h)
	} else if s := sysString(sys, path.Join(dev, "xgmi_hive_info", "xgmi_hive_id")); s != "" && s != "0" {
		h, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not an unsigned decimal integer", path.Join(dev, "xgmi_hive_info", "xgmi_hive_id"), s)
		}
		g.KFD.XGMIHive = fmt.Sprintf("%016x", h)
	}
	g.MemoryBytes = n.mem
	if g.MemoryBytes == 0 {
		g.MemoryBytes = p["local_mem_size"]
	}
	if g.MemoryBytes == 0 {
		if s := sysString(sys, path.Join(dev, "mem_info_vram_total")); s != "" {
			if g.MemoryBytes, err = strconv.ParseUint(s, 10, 64); err != nil {
				return nil, fmt.Errorf("%s: %q is not an unsigned decimal integer", path.Join(dev, "mem_info_vram_total"), s)
			}
		}
	}
	if g.MemoryBytes == 0 {
		return nil, fmt.Errorf("%s: the GPU has no frame buffer memory bank, local_mem_size or mem_info_vram_total", file)
	}
	if s := sysString(sys, path.Join(dev, "numa_node")); s != "" && s != "-1" {
		numa, err := strconv.Atoi(s)
		if err != nil || numa < 0 {
			return nil, fmt.Errorf("%s: %q is not a NUMA node (-1 or a number from 0)", path.Join(dev, "numa_node"), s)
		}
		g.NUMANode = &numa
	}
	if rl, ok := sys.(fs.ReadLinkFS); ok {
		if a, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(g.PCIBusID, deviceattribute.WithFS(rl)); err == nil && a.Value.StringValue != nil {
			g.PCIeRoot = *a.Value.StringValue
		}
		if g.NUMANode == nil {
			if a, err := deviceattribute.GetNUMANodeAttributeByPCIBusID(g.PCIBusID, deviceattribute.ScalarAttribute, deviceattribute.WithFS(rl)); err == nil && a.Value.IntValue != nil {
				numa := int(*a.Value.IntValue)
				g.NUMANode = &numa
			}
		}
	}
	g.KFD.ComputePartition = partitionMode(sysString(sys, path.Join(dev, "current_compute_partition")))
	g.KFD.MemoryPartition = partitionMode(sysString(sys, path.Join(dev, "current_memory_partition")))
	g.ProductName = productName(g.Vendor, p["device_id"], g.KFD.GFXTarget, sysString(sys, path.Join(dev, "product_name")))
	return g, nil
}

// partitions numbers the KFD nodes that share one PCI function (the partitions of one
// physical GPU, e.g. eight in CPX mode) and gives each a UUID of its own.
func partitions(gpus []driver.GPU) {
	byBus := map[string][]int{}
	for k := range gpus {
		byBus[gpus[k].PCIBusID] = append(byBus[gpus[k].PCIBusID], k)
	}
	for _, ks := range byBus {
		if len(ks) < 2 {
			continue
		}
		slices.SortFunc(ks, func(a, b int) int { return cmp.Compare(gpus[a].KFD.Node, gpus[b].KFD.Node) })
		for p, k := range ks {
			info := gpus[k].KFD
			info.Partition, info.Partitions, info.WholeUUID = p, len(ks), false
			gpus[k].UUID = fmt.Sprintf("%s-p%d", gpus[k].UUID, p)
		}
	}
}

// partitionMode keeps a partition mode sysfs printed ("SPX", "NPS1") if it looks like one.
func partitionMode(s string) string {
	if len(s) > 8 || strings.IndexFunc(s, func(r rune) bool { return (r < 'A' || r > 'Z') && (r < '0' || r > '9') }) >= 0 {
		return ""
	}
	return s
}

// sysString is a sysfs attribute's text, trimmed; "" when absent.
func sysString(sys fs.FS, name string) string {
	data, err := readFile(sys, name)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

func exists(sys fs.FS, name string) bool {
	_, err := fs.Stat(sys, name)
	return err == nil
}

// Check re-reads the KFD node of g, a GPU of an earlier discovery: an error, naming the
// file, when the node is gone, no longer readable, or now another GPU (gpu_id changes when
// a GPU is reset away or replaced). The kubelet plugin takes such a GPU out of scheduling.
func Check(sys fs.FS, g *driver.GPU) error {
	if g.KFD == nil {
		return nil
	}
	n, err := readNode(sys, g.KFD.Node)
	switch {
	case err != nil:
		return err
	case n == nil:
		return fmt.Errorf("%s/%d is no longer a GPU", TopologyNodes, g.KFD.Node)
	case n.gpuID != g.KFD.GPUID:
		return fmt.Errorf("%s/%d/gpu_id is %d, was %d: the GPU went away", TopologyNodes, g.KFD.Node, n.gpuID, g.KFD.GPUID)
	}
	return nil
}

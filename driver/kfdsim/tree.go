package kfdsim

import (
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing/fstest"
)

// Vendor ids as KFD prints them.
var vendorIDs = map[string]int{"amd": 0x1002, "hygon": 0x1d94}

// Tree builds the node's sysfs tree (paths relative to /sys): the KFD topology with one
// CPU node per NUMA node and one GPU node per partition, the DRM cards and render nodes,
// and each GPU's PCI device with the bus/pci/devices links the PCIe root is read from.
// seed (the node's name) makes unique ids and the hive id stable and distinct per node.
func (p *Profile) Tree(seed string) fstest.MapFS {
	sys := fstest.MapFS{}
	file := func(name, content string) { sys[name] = &fstest.MapFile{Data: []byte(content + "\n"), Mode: 0o444} }
	link := func(name, target string) {
		sys[name] = &fstest.MapFile{Data: []byte(target), Mode: fs.ModeSymlink | 0o777}
	}
	props := func(name string, kv ...any) {
		var b strings.Builder
		for k := 0; k < len(kv); k += 2 {
			fmt.Fprintf(&b, "%s %v\n", kv[k], kv[k+1])
		}
		sys[name] = &fstest.MapFile{Data: []byte(b.String()), Mode: 0o444}
	}
	parts := max(p.Partitions, 1)
	perPackage := max(p.GCDsPerPackage, 1)
	hive := uint64(0)
	if p.XGMI {
		hive = hash(seed, "hive")
	}
	nodes := "class/kfd/kfd/topology/nodes"
	for n := range p.NUMANodes {
		dir := fmt.Sprintf("%s/%d", nodes, n)
		props(dir+"/properties", "cpu_cores_count", 48, "simd_count", 0, "mem_banks_count", 1, "io_links_count", 0,
			"gfx_target_version", 0, "vendor_id", 0, "device_id", 0, "location_id", 0, "domain", 0, "drm_render_minor", 0, "hive_id", 0)
		file(dir+"/gpu_id", "0")
		file(dir+"/name", "")
	}
	cus := p.ComputeUnits / parts
	mem := uint64(p.Memory.Value())
	if p.MemoryPartition == "NPS4" {
		mem /= 4
	}
	for g := range p.GPUs {
		bus := p.firstBus + 0x10*uint64(g)
		bdf := fmt.Sprintf("0000:%02x:00.0", bus)
		numa := g * p.NUMANodes / p.GPUs
		pciDir := path.Join("devices", fmt.Sprintf("pci0000:%02x", bus&0xf0), bdf)
		file(pciDir+"/numa_node", fmt.Sprint(numa))
		file(pciDir+"/vendor", fmt.Sprintf("0x%04x", vendorIDs[p.Vendor]))
		file(pciDir+"/device", fmt.Sprintf("0x%04x", p.deviceID))
		file(pciDir+"/class", "0x120000")
		link("bus/pci/devices/"+bdf, "../../../"+pciDir)
		uid := hash(seed, fmt.Sprint("gpu", g)) >> 1
		for part := range parts {
			k := g*parts + part
			id := p.NUMANodes + k
			dir := fmt.Sprintf("%s/%d", nodes, id)
			var links []string
			props(dir+"/properties",
				"cpu_cores_count", 0, "simd_count", cus*p.SIMDPerCU, "mem_banks_count", 1,
				"simd_per_cu", p.SIMDPerCU, "array_count", max(cus/2, 1),
				"gfx_target_version", p.GFXTargetVersion, "vendor_id", vendorIDs[p.Vendor], "device_id", p.deviceID,
				"location_id", bus<<8, "domain", 0, "drm_render_minor", 128+k, "hive_id", hive,
				"num_xcc", max(p.XCCs/parts, 1), "local_mem_size", mem, "unique_id", uid)
			file(dir+"/gpu_id", fmt.Sprint(hash(seed, fmt.Sprint("gpu_id", k))%65535+1))
			file(dir+"/name", fmt.Sprintf("gfx%d", p.GFXTargetVersion))
			props(dir+"/mem_banks/0/properties", "heap_type", 1, "size_in_bytes", mem, "flags", 0, "width", 8192, "mem_clk_max", 1300)
			links = append(links, fmt.Sprintf("type %d\nnode_from %d\nnode_to %d\nweight 20\n", 2, id, numa))
			if p.XGMI {
				for og := range p.GPUs {
					if og == g {
						continue
					}
					weight := 15
					if og/perPackage != g/perPackage {
						weight = 30
					}
					links = append(links, fmt.Sprintf("type %d\nnode_from %d\nnode_to %d\nweight %d\n", 11, id, p.NUMANodes+og*parts+part, weight))
				}
			}
			for l, text := range links {
				sys[fmt.Sprintf("%s/io_links/%d/properties", dir, l)] = &fstest.MapFile{Data: []byte(text), Mode: 0o444}
			}
			card := fmt.Sprintf("class/drm/card%d/device", k)
			file(card+"/vendor", fmt.Sprintf("0x%04x", vendorIDs[p.Vendor]))
			file(card+"/device", fmt.Sprintf("0x%04x", p.deviceID))
			file(card+"/numa_node", fmt.Sprint(numa))
			file(card+"/unique_id", fmt.Sprintf("%016x", uid))
			file(card+"/product_name", p.ProductName)
			file(card+"/mem_info_vram_total", fmt.Sprint(mem))
			if p.ComputePartition != "" {
				file(card+"/current_compute_partition", p.ComputePartition)
			}
			if p.MemoryPartition != "" {
				file(card+"/current_memory_partition", p.MemoryPartition)
			}
			if p.XGMI {
				file(card+"/xgmi_hive_info/xgmi_hive_id", fmt.Sprint(hive))
			}
			file(fmt.Sprintf("class/drm/renderD%d/dev", 128+k), fmt.Sprintf("226:%d", 128+k))
			file(fmt.Sprintf("class/drm/card%d/dev", k), fmt.Sprintf("226:%d", k))
		}
	}
	return sys
}

// hash is a stable 64-bit id from the seed and a label, never 0.
func hash(seed, label string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(seed + "/" + label))
	return h.Sum64() | 1
}

// WriteDir writes the tree under dir (which becomes the /sys root), with its symlinks.
func WriteDir(tree fstest.MapFS, dir string) error {
	names := make([]string, 0, len(tree))
	for name := range tree {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		f := tree[name]
		target := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if f.Mode&fs.ModeSymlink != 0 {
			if err := os.Symlink(string(f.Data), target); err != nil {
				return err
			}
			continue
		}
		if err := os.WriteFile(target, f.Data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

package nvmlsim

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	nvdev "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"

	"github.com/gpudra/gpudra/topology"
)

// node is a validated profile resolved into plain data the server and sysfs are built from.
type node struct {
	name            string
	base            string // a baseServers key, or "" for go-nvml's generic server
	driverVersion   string // "" with base: keep the mock's
	nvmlVersion     string
	cudaVersion     int
	gpu             gpus.Config
	multiprocessors int
	migEnabled      bool
	count           int
	roots           []pcieRoot
	gpus            []gpuSlot
	nvlink          nvlinkFabric
}

var (
	profileNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`)
	driverRE      = regexp.MustCompile(`^[0-9]+(\.[0-9]+){1,3}$`)
	majorMinorRE  = regexp.MustCompile(`^([0-9]{1,2})(?:\.([0-9]{1,2}))?$`)
)

// resolve validates p and turns it into a node, reporting every problem found.
func (p *Profile) resolve() (*node, error) {
	errs := &fieldErrors{source: p.source}
	n := &node{name: p.Name, migEnabled: p.GPU.MIGEnabled}

	if !profileNameRE.MatchString(p.Name) {
		errs.add("name", "must be lower-case letters, digits, '.' and '-', got %q", p.Name)
	}
	var fromModel *gpuModel
	switch {
	case p.Base != "" && p.Model != "":
		errs.add("model", "set either base (a go-nvml mock server) or model (a go-nvml GPU config), not both")
	case p.Base != "":
		b, ok := baseServers[p.Base]
		if !ok {
			errs.add("base", "%q is not one of %s", p.Base, sortedKeys(baseServers))
			break
		}
		n.base = p.Base
		m := gpuModels[b.model]
		fromModel = &m
	case p.Model != "":
		m, ok := gpuModels[p.Model]
		if !ok {
			errs.add("model", "%q is not one of %s", p.Model, sortedKeys(gpuModels))
			break
		}
		fromModel = &m
	}
	if fromModel != nil {
		n.gpu, n.multiprocessors = fromModel.config, fromModel.multiprocessors
	}
	p.resolveGPU(n, errs)

	n.count = p.Count
	if n.count == 0 && n.base != "" {
		n.count = 8
	}
	if n.count < 1 || n.count > topology.MaxGPUs {
		errs.add("count", "must be 1..%d GPUs, got %d", topology.MaxGPUs, p.Count)
		n.count = 0
	}
	p.resolveDriver(n, errs)
	if n.count > 0 {
		p.resolvePCIe(n, errs)
		p.resolveNVLink(n, errs)
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	return n, nil
}

func (p *Profile) resolveGPU(n *node, errs *fieldErrors) {
	g := p.GPU
	if g.Name != "" {
		n.gpu.Name = g.Name
	}
	if g.Brand != "" {
		b, ok := brands[g.Brand]
		if !ok {
			errs.add("gpu.brand", "%q is not one of %s", g.Brand, sortedKeys(brands))
		}
		n.gpu.Brand = b
	} else if n.gpu.Brand == nvml.BRAND_UNKNOWN {
		n.gpu.Brand = nvml.BRAND_NVIDIA
	}
	if g.Architecture != "" {
		a, ok := architectures[g.Architecture]
		if !ok {
			errs.add("gpu.architecture", "%q is not one of %s", g.Architecture, strings.Join(architectureOrder, ", "))
		}
		n.gpu.Architecture = a
	}
	if g.ComputeCapability != "" {
		major, minor, ok := parseMajorMinor(string(g.ComputeCapability))
		if !ok {
			errs.add("gpu.computeCapability", "must be \"<major>.<minor>\" such as \"8.9\" (quote it in YAML), got %q", g.ComputeCapability)
		}
		n.gpu.CudaMajor, n.gpu.CudaMinor = major, minor
	}
	if g.MemoryMiB != 0 {
		n.gpu.MemoryMB = g.MemoryMiB
	}
	if g.Multiprocessors > 1024 {
		errs.add("gpu.multiprocessors", "must be 1..1024, got %d", g.Multiprocessors)
	} else if g.Multiprocessors != 0 {
		n.multiprocessors = g.Multiprocessors
	}
	if g.PCIDeviceID != "" {
		id, err := strconv.ParseUint(string(g.PCIDeviceID), 0, 32)
		if err != nil {
			errs.add("gpu.pciDeviceId", "must be a 32-bit PCI device id such as 0x1DB510DE (device id, vendor 10DE), got %q", g.PCIDeviceID)
		}
		n.gpu.PciDeviceId = uint32(id)
	}
	// tables names the gpuModels entry the MIG tables come from, from names the field.
	tables, from := p.Model, "model"
	if b, ok := baseServers[p.Base]; ok {
		tables, from = b.model, "base "+p.Base
	}
	switch g.MIG {
	case "":
	case "none":
		n.gpu.MIGProfiles = gpus.MIGProfileConfig{}
		tables = ""
	default:
		m, ok := gpuModels[g.MIG]
		if !ok {
			errs.add("gpu.mig", "%q is not \"none\" or one of %s", g.MIG, sortedKeys(gpuModels))
		}
		n.gpu.MIGProfiles = m.config.MIGProfiles
		tables, from = g.MIG, "gpu.mig"
	}
	if g.MIGEnabled && len(n.gpu.MIGProfiles.GpuInstanceProfiles) == 0 {
		errs.add("gpu.migEnabled", "the GPU has no MIG tables; set gpu.mig to one of %s", sortedKeys(gpuModels))
	}
	if m, ok := gpuModels[tables]; ok && n.gpu.MemoryMB != 0 && len(n.gpu.MIGProfiles.GpuInstanceProfiles) > 0 {
		checkMIGNames(n.gpu.MemoryMB, g.MemoryMiB != 0, tables, from, m.config, errs)
	}
	for _, req := range []struct {
		path    string
		missing bool
	}{
		{"gpu.name", n.gpu.Name == ""},
		{"gpu.architecture", n.gpu.Architecture == 0},
		{"gpu.computeCapability", n.gpu.CudaMajor == 0 && g.ComputeCapability == ""},
		{"gpu.memoryMiB", n.gpu.MemoryMB == 0},
		{"gpu.multiprocessors", n.multiprocessors <= 0},
		{"gpu.pciDeviceId", n.gpu.PciDeviceId == 0 && g.PCIDeviceID == ""},
	} {
		if req.missing {
			errs.add(req.path, "required (no base or model provides it)")
		}
	}
}

func (p *Profile) resolveDriver(n *node, errs *fieldErrors) {
	d := p.Driver
	if d.Version == "" && d.CUDAVersion == "" && d.NVMLVersion == "" && n.base != "" {
		return // the mock server's own versions
	}
	if !driverRE.MatchString(d.Version) {
		errs.add("driver.version", "must be a driver version such as 550.90.07, got %q", d.Version)
	}
	major, minor, ok := parseMajorMinor(string(d.CUDAVersion))
	if !ok {
		errs.add("driver.cudaVersion", "must be \"<major>.<minor>\" such as \"12.4\" (quote it in YAML), got %q", d.CUDAVersion)
	}
	n.driverVersion = d.Version
	n.cudaVersion = major*1000 + minor*10
	n.nvmlVersion = d.NVMLVersion
	if n.nvmlVersion == "" {
		n.nvmlVersion = fmt.Sprintf("%d.%s", major, d.Version)
	} else if !driverRE.MatchString(n.nvmlVersion) {
		errs.add("driver.nvmlVersion", "must be a version such as 12.550.90.07, got %q", n.nvmlVersion)
	}
}

func parseMajorMinor(s string) (major, minor int, ok bool) {
	m := majorMinorRE.FindStringSubmatch(s)
	if m == nil {
		return 0, 0, false
	}
	major, _ = strconv.Atoi(m[1])
	if m[2] != "" {
		minor, _ = strconv.Atoi(m[2])
	}
	return major, minor, major > 0
}

// resolveNVLink validates nvlink and wires every GPU's links.
func (p *Profile) resolveNVLink(n *node, errs *fieldErrors) {
	nl := p.NVLink
	if nl == nil {
		return
	}
	if nl.LinksPerGPU < 0 || nl.LinksPerGPU > nvml.NVLINK_MAX_LINKS {
		errs.add("nvlink.linksPerGPU", "must be 1..%d (nvml.NVLINK_MAX_LINKS), got %d", nvml.NVLINK_MAX_LINKS, nl.LinksPerGPU)
		return
	}
	switch {
	case nl.Matrix != nil && nl.NVSwitch != nil:
		errs.add("nvlink", "set either matrix (point-to-point links) or nvswitch (a switch fabric), not both")
	case nl.Matrix != nil:
		counts := parseMatrix(nl.Matrix, n.count, errs)
		if counts != nil {
			n.nvlink = matrixFabric(counts, nl.LinksPerGPU, errs)
		}
	case nl.NVSwitch != nil:
		sw := nl.NVSwitch
		if sw.Count < 1 || sw.Count > 64 {
			errs.add("nvlink.nvswitch.count", "must be 1..64 switches, got %d", sw.Count)
			return
		}
		if nl.LinksPerGPU < sw.Count {
			errs.add("nvlink.linksPerGPU", "must be %d..%d: at least one link per NVSwitch, got %d", sw.Count, nvml.NVLINK_MAX_LINKS, nl.LinksPerGPU)
			return
		}
		id := uint64(nvswitchGen2DeviceID)
		if n.gpu.Architecture >= nvml.DEVICE_ARCH_HOPPER {
			id = nvswitchGen3DeviceID
		}
		if sw.PCIDeviceID != "" {
			var err error
			if id, err = strconv.ParseUint(string(sw.PCIDeviceID), 0, 32); err != nil {
				errs.add("nvlink.nvswitch.pciDeviceId", "must be a 32-bit PCI device id such as 0x22A310DE, got %q", sw.PCIDeviceID)
				return
			}
		}
		n.nvlink = switchFabric(n.count, sw.Count, nl.LinksPerGPU, uint32(id))
	default:
		errs.add("nvlink", "set matrix (point-to-point links) or nvswitch (a switch fabric); omit nvlink for PCIe-only GPUs")
	}
}

// parseMatrix checks the matrix is count×count, symmetric, with an X diagonal, and
// returns the link counts.
func parseMatrix(m LinkMatrix, count int, errs *fieldErrors) [][]int {
	before := len(errs.list)
	if len(m) != count {
		errs.add("nvlink.matrix", "must have one row per GPU (%d), got %d rows", count, len(m))
		return nil
	}
	counts := make([][]int, count)
	for i, row := range m {
		if len(row) != count {
			errs.add(fmt.Sprintf("nvlink.matrix[%d]", i), "must have one cell per GPU (%d), got %d", count, len(row))
			continue
		}
		counts[i] = make([]int, count)
		for j, cell := range row {
			path := fmt.Sprintf("nvlink.matrix[%d][%d]", i, j)
			if i == j {
				if cell != "X" && cell != "x" {
					errs.add(path, "the diagonal must be X, got %q", cell)
				}
				continue
			}
			if cell == "-" {
				continue
			}
			c, err := strconv.Atoi(cell)
			if err != nil || c < 0 || c > nvml.NVLINK_MAX_LINKS {
				errs.add(path, "link count must be an integer 0..%d or \"-\", got %q", nvml.NVLINK_MAX_LINKS, cell)
				continue
			}
			counts[i][j] = c
		}
	}
	if len(errs.list) > before {
		return nil
	}
	for i := range count {
		for j := i + 1; j < count; j++ {
			if counts[i][j] != counts[j][i] {
				errs.add(fmt.Sprintf("nvlink.matrix[%d][%d]", j, i), "the matrix must be symmetric: GPU %d→%d has %d links but %d→%d has %d",
					i, j, counts[i][j], j, i, counts[j][i])
			}
		}
	}
	if len(errs.list) > before {
		return nil
	}
	return counts
}

// checkMIGNames refuses GPU memory of memMiB with the MIG tables of the gpuModels entry
// tables (from names the field they come from) unless it is memory of that GPU: memory on
// which NVML gives the profiles the names that GPU reports. A profile's name gives its
// memory as a share of the GPU's, rounded up to eighths (go-nvlib's NewMigProfile, which
// discovery uses), and go-nvml's tables give each profile a fixed size in MiB, so other
// memory yields names no GPU reports, such as 1g.20gb for the one-slice profile of an
// H100 with 81559 MiB, or profiles that cover a fraction of the GPU.
func checkMIGNames(memMiB uint64, memorySet bool, tables, from string, model gpus.Config, errs *fieldErrors) {
	lo, hi := migMemoryRange(model)
	if lo <= memMiB && memMiB <= hi {
		return
	}
	want := migNames(model.MIGProfiles, model.MemoryMB)
	got := migNames(model.MIGProfiles, memMiB)
	var wrong []string
	for i := range got {
		if got[i] != want[i] {
			wrong = append(wrong, fmt.Sprintf("%s instead of %s", got[i], want[i]))
		}
	}
	why := fmt.Sprintf("they are those of a GPU of %d MiB", model.MemoryMB)
	if len(wrong) > 0 {
		why = "NVML would name their profiles " + strings.Join(wrong, ", ") + ", names no GPU reports"
	}
	accepted := fmt.Sprintf("%d", lo)
	if hi > lo {
		accepted = fmt.Sprintf("%d..%d", lo, hi)
	}
	var fit []string
	for _, k := range slices.Sorted(maps.Keys(gpuModels)) {
		c := gpuModels[k].config
		if lo, hi := migMemoryRange(c); len(c.MIGProfiles.GpuInstanceProfiles) > 0 && lo <= memMiB && memMiB <= hi {
			fit = append(fit, k)
		}
	}
	others := "gpu.mig none"
	if len(fit) > 0 {
		others = "gpu.mig " + strings.Join(fit, ", ") + " or none"
	}
	field, what := "gpu.memoryMiB", fmt.Sprintf("%d MiB", memMiB)
	if !memorySet {
		field, what = "gpu.mig", fmt.Sprintf("the GPU's %d MiB", memMiB)
	}
	errs.add(field, "%s do not fit the MIG tables of %s (%s): %s; accepted: gpu.memoryMiB %s with these tables, or with %d MiB %s",
		what, tables, from, why, accepted, memMiB, others)
}

// migMemoryRange is the GPU memory, in MiB, that fits model's MIG tables: the range around
// model's memory on which their profiles have the names they have on model. It lies in the
// GiB of model's memory, as NVML's names count the GPU memory in whole GiB, rounded up.
func migMemoryRange(model gpus.Config) (lo, hi uint64) {
	if model.MemoryMB == 0 {
		return 0, 0
	}
	want := migNames(model.MIGProfiles, model.MemoryMB)
	fits := func(m uint64) bool { return slices.Equal(migNames(model.MIGProfiles, m), want) }
	gib := (model.MemoryMB + 1023) / 1024
	first, last := (gib-1)*1024+1, gib*1024
	// Within one GiB each profile's share, in eighths rounded up, only falls as the memory
	// grows, so the memory that fits is one range: search each side of model.MemoryMB.
	lo = first + uint64(sort.Search(int(model.MemoryMB-first), func(i int) bool { return fits(first + uint64(i)) }))
	hi = model.MemoryMB + uint64(sort.Search(int(last-model.MemoryMB), func(i int) bool { return !fits(model.MemoryMB + uint64(i) + 1) }))
	return lo, hi
}

// migNames are the names NVML gives the GPU-instance profiles of tables, each with the
// compute instance that uses all of it (as discovery names them), on a GPU of memMiB.
func migNames(tables gpus.MIGProfileConfig, memMiB uint64) []string {
	var names []string
	for _, id := range slices.Sorted(maps.Keys(tables.GpuInstanceProfiles)) {
		gi := tables.GpuInstanceProfiles[id]
		ci, ok := fullComputeInstance[gi.SliceCount]
		if !ok {
			continue
		}
		name, err := migNamer.NewMigProfile(id, ci, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, gi.MemorySizeMB, memMiB<<20)
		if err != nil {
			continue
		}
		names = append(names, name.String())
	}
	return names
}

var migNamer = nvdev.New(nil)

// fullComputeInstance maps a GPU instance's slice count to the compute-instance profile
// that uses all of it.
var fullComputeInstance = map[uint32]int{
	1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE,
	2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
	3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE,
	4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE,
	6: nvml.COMPUTE_INSTANCE_PROFILE_6_SLICE,
	7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE,
	8: nvml.COMPUTE_INSTANCE_PROFILE_8_SLICE,
}

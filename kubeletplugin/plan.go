package kubeletplugin

import (
	"fmt"
	"path/filepath"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// planner decides, from plain data, what preparing a claim means on this node: which
// GPUs and MIG placements each allocated device uses and which CDI edits it gets.
type planner struct {
	nodeName string
	inv      *driver.Inventory
	devices  map[string]resourceapi.Device // published devices by name
	node     cdi.Node
	// stateDir holds per-claim MPS and HAMi cache directories.
	stateDir string
	// priorities, when set, gives shares without a configured priority their pods' one.
	priorities *podPriorities
	// api reads a claim's pods and their other claims; nil without an API server.
	api *apiReader
}

func newPlanner(nodeName string, inv *driver.Inventory, pool *driver.Pool, node cdi.Node, stateDir string) *planner {
	p := &planner{nodeName: nodeName, inv: inv, devices: map[string]resourceapi.Device{}, node: node, stateDir: stateDir}
	for _, s := range pool.Slices {
		for _, d := range s.Devices {
			p.devices[d.Name] = d
		}
	}
	return p
}

// readPublished reads a device this node publishes (api.ReadDevice), which must name its
// GPUs; an error names the attribute.
func readPublished(pub resourceapi.Device) (api.DeviceInfo, error) {
	info, err := api.ReadDevice(&pub)
	if err != nil {
		return info, err
	}
	if len(info.GPUs) == 0 {
		attr := api.AttrIndex
		if info.Type == api.TypeMIG {
			attr = api.AttrParentIndex
		}
		return info, fmt.Errorf("device %s: attribute %s is missing: want the index of its GPU", pub.Name, attr)
	}
	return info, nil
}

// vgpuDirName and preloadDirName are the directories, in the plugin's state directory,
// of the claims' HAMi-core caches and preload files.
const (
	vgpuDirName    = "vgpu"
	preloadDirName = "vgpu-preload"
)

// mpsDir and cacheDir are the claim's host directories for MPS and HAMi-core;
// preloadFile is its HAMi-core preload file (cdi.Device.PreloadFile). The preload file
// is not in the cache directory, which its containers may write.
func (p *planner) mpsDir(claimUID string) string { return mpsClaimDir(p.stateDir, claimUID) }
func (p *planner) cacheDir(claimUID string) string {
	return filepath.Join(p.stateDir, vgpuDirName, claimUID)
}
func (p *planner) preloadFile(claimUID string) string {
	return filepath.Join(p.stateDir, preloadDirName, claimUID)
}

// plan resolves the claim's results for this driver on this node. Configuration errors
// name the field (status.allocation.devices.config[i].opaque.parameters...). reads are
// the prepare's reads of the claim's pods.
func (p *planner) plan(claim *resourceapi.ResourceClaim, reads *claimReads) ([]prepared.Device, error) {
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
	}
	alloc := claim.Status.Allocation.Devices
	var out []prepared.Device
	// The claim's pods are read once, and only for a share that needs their priority.
	var fromPods *derived
	priority := func() (derived, error) {
		if fromPods == nil {
			pods, err := reads.reservedPods()
			if err != nil {
				return derived{}, fmt.Errorf("the share's priority (limits.priority is unset): %w", err)
			}
			d := p.priorities.of(claim, pods)
			fromPods = &d
		}
		return *fromPods, nil
	}
	for k, r := range alloc.Results {
		if r.Driver != api.DriverName {
			continue
		}
		if r.Pool != p.nodeName {
			return nil, fmt.Errorf("status.allocation.devices.results[%d]: device %s/%s is in pool %q, this node is %q", k, r.Pool, r.Device, r.Pool, p.nodeName)
		}
		conf, err := api.Resolve(alloc.Config, api.DriverName, r.Request)
		if err != nil {
			return nil, fmt.Errorf("request %q: invalid device configuration: %w", r.Request, err)
		}
		d, err := p.device(string(claim.UID), r, conf, priority)
		if err != nil {
			return nil, fmt.Errorf("status.allocation.devices.results[%d] (%s): %w", k, r.Device, err)
		}
		out = append(out, d)
	}
	return out, nil
}

// device plans one allocated device. priority gives a share whose configuration leaves
// limits.priority unset its pods' priority, when p.priorities is set.
func (p *planner) device(claimUID string, r resourceapi.DeviceRequestAllocationResult, conf api.Resolved, priority func() (derived, error)) (prepared.Device, error) {
	pub, ok := p.devices[r.Device]
	if !ok {
		return prepared.Device{}, fmt.Errorf("device %q is not published by this node", r.Device)
	}
	info, err := readPublished(pub)
	if err != nil {
		return prepared.Device{}, err
	}
	pd := prepared.Device{Request: r.Request, Pool: r.Pool, Device: r.Device, Type: info.Type}
	name := claimUID + "-" + r.Device
	if r.ShareID != nil {
		pd.ShareID = string(*r.ShareID)
		name += "-" + pd.ShareID
	}
	pd.CDI = cdi.Device{Name: name, Device: r.Device}
	sharing := conf.GPU.Sharing
	switch pd.Type {
	case api.TypeGPU, api.TypeShare:
		idx := info.GPUs[0]
		g := p.inv.GPU(idx)
		if g == nil {
			return prepared.Device{}, fmt.Errorf("GPU %d is not in the inventory", idx)
		}
		pd.GPUs = []int{idx}
		pd.CDI.GPUs = []cdi.GPU{cdiGPU(g)}
		pd.CDI.MemoryBytes, pd.CDI.ComputePercent = int64(g.MemoryBytes), 100
	case api.TypeNVLinkGroup, api.TypeXGMIGroup:
		for _, idx := range info.Members {
			g := p.inv.GPU(idx)
			if g == nil {
				return prepared.Device{}, fmt.Errorf("device %s: attribute %s: group member %d is not a GPU of this node", r.Device, api.AttrMembers, idx)
			}
			pd.GPUs = append(pd.GPUs, idx)
			pd.CDI.GPUs = append(pd.CDI.GPUs, cdiGPU(g))
			pd.CDI.MemoryBytes = int64(g.MemoryBytes)
		}
		pd.CDI.ComputePercent = 100
	case api.TypeMIG:
		mi, err := p.migInstance(info)
		if err != nil {
			return prepared.Device{}, err
		}
		pd.MIG, pd.GPUs = mi, []int{mi.Parent}
		pd.CDI.MemoryBytes, pd.CDI.ComputePercent = p.migCapacity(mi)
		sharing = conf.MIG.Sharing
	default:
		return prepared.Device{}, fmt.Errorf("device %q has unknown type %q", r.Device, pd.Type)
	}

	mem := pd.CDI.MemoryBytes
	if l := conf.GPU.Limits; pd.Type != api.TypeShare && l != nil && (l.Policy != api.PolicyFixed || l.ComputeLimit != nil || l.Priority != "") {
		return prepared.Device{}, field.Invalid(field.NewPath("limits"), "", fmt.Sprintf("device %s is of type %s: a share's policy, computeLimit and priority apply only to devices of type %s (DeviceClass %s)", r.Device, pd.Type, api.TypeShare, api.DeviceClassShare))
	}
	if pd.Type == api.TypeShare {
		memQ, compQ := driver.ShareMemoryDefault, driver.ShareComputeMin
		if q, ok := r.ConsumedCapacity[api.CapMemory]; ok {
			memQ = q
		}
		if q, ok := r.ConsumedCapacity[api.CapCompute]; ok {
			compQ = q
		}
		// The allocator bounds both by the device's capacity; a status written by other
		// means is checked all the same before it becomes a limit.
		if memQ.Sign() <= 0 || memQ.Cmp(maxShareMemory) > 0 {
			return prepared.Device{}, field.Invalid(field.NewPath("status", "allocation", "devices", "results").Key(r.Request).Child("consumedCapacity", string(api.CapMemory)), memQ.String(), "a share's memory must be from 1 byte to the GPU's memory")
		}
		comp, ferr := api.ComputePercent(field.NewPath("status", "allocation", "devices", "results").Key(r.Request).Child("consumedCapacity", string(api.CapCompute)), compQ)
		if ferr != nil {
			return prepared.Device{}, ferr
		}
		mem = memQ.Value()
		pd.CDI.MemoryBytes, pd.CDI.ComputePercent = mem, comp
		tier := conf.GPU.Limits
		if errs := tier.ValidateFor(field.NewPath("limits"), comp); len(errs) > 0 {
			return prepared.Device{}, fmt.Errorf("invalid device configuration: %w", errs.ToAggregate())
		}
		limits := &cdi.Limits{MemoryMiB: mem >> 20, ComputePercent: tier.ComputeCap(comp),
			Policy: string(tier.Policy), Priority: string(tier.Priority)}
		if limits.Priority == "" && p.priorities != nil {
			d, err := priority()
			if err != nil {
				return prepared.Device{}, err
			}
			limits.Priority = string(d.priority)
		}
		switch conf.GPU.Limits.Enforcement {
		case api.EnforceHAMi:
			if p.node.VGPULibrary == "" {
				return prepared.Device{}, field.Invalid(field.NewPath("limits", "enforcement"), api.EnforceHAMi,
					"this node has no HAMi-core libvgpu.so configured (--vgpu-library); use Auto or MPS")
			}
			limits.HAMi = true
		case api.EnforceAuto:
			limits.HAMi = p.node.VGPULibrary != ""
		}
		if factor, over := memoryOversubscription(info); over {
			if err := oversubscribable(conf.GPU.Limits.Enforcement, sharing.Strategy, limits.HAMi, factor); err != nil {
				return prepared.Device{}, err
			}
			limits.Oversubscribed = true
		}
		pd.CDI.Limits = limits
		if limits.HAMi {
			pd.CDI.CacheDir, pd.CDI.PreloadFile = p.cacheDir(claimUID), p.preloadFile(claimUID)
		}
	}
	if errs := sharing.ValidateFor(field.NewPath("sharing"), api.Device{MemoryBytes: mem}); len(errs) > 0 {
		return prepared.Device{}, fmt.Errorf("invalid device configuration: %w", errs.ToAggregate())
	}
	useMPS := sharing.Strategy == api.MPS || (pd.CDI.Limits != nil && !pd.CDI.Limits.HAMi)
	if useMPS {
		dir := p.mpsDir(claimUID)
		m := &cdi.MPS{PipeDir: filepath.Join(dir, "pipe"), LogDir: filepath.Join(dir, "log"), ShmDir: filepath.Join(dir, "shm")}
		if c := sharing.MPS; c != nil {
			if c.DefaultActiveThreadPercentage != nil {
				m.ActiveThreadPercent = *c.DefaultActiveThreadPercentage
			}
			if c.DefaultPinnedDeviceMemoryLimit != nil {
				m.PinnedMemoryMiB = c.DefaultPinnedDeviceMemoryLimit.Value() >> 20
			}
		}
		if l := pd.CDI.Limits; l != nil { // a share's capacity caps whatever the config asks
			if l.ComputePercent > 0 && (m.ActiveThreadPercent == 0 || m.ActiveThreadPercent > l.ComputePercent) {
				m.ActiveThreadPercent = l.ComputePercent
			}
			if m.PinnedMemoryMiB == 0 || m.PinnedMemoryMiB > l.MemoryMiB {
				m.PinnedMemoryMiB = l.MemoryMiB
			}
			m.Priority = l.Priority
		}
		pd.CDI.MPS = m
	} else if sharing.TimeSlicing != nil {
		pd.CDI.TimeSlice = string(sharing.TimeSlicing.Interval)
	}
	return pd, nil
}

// memoryOversubscription is the factor by which a published share device's memory capacity
// exceeds its card's (its memoryOversubscriptionPercent), and whether it does.
func memoryOversubscription(share api.DeviceInfo) (string, bool) {
	if !share.MemoryOversubscribed {
		return "", false
	}
	return strconv.FormatFloat(float64(share.MemoryOversubscriptionPercent)/100, 'f', -1, 64), true
}

// oversubscribable refuses a share on a node that oversubscribes GPU memory unless
// HAMi-core enforces it alone: MPS cannot spill a client's memory to the host.
func oversubscribable(enforcement api.Enforcement, strategy api.SharingStrategy, hami bool, factor string) error {
	elsewhere := "a node without memory oversubscription (select !device.attributes[\"gpu.gpudra.dev\"].memoryOversubscribed)"
	switch {
	case !hami && enforcement == api.EnforceAuto:
		return field.Invalid(field.NewPath("limits", "enforcement"), enforcement, fmt.Sprintf(
			"this node oversubscribes GPU memory by %s (--memory-oversubscription) and has no HAMi-core libvgpu.so (--vgpu-library), so Auto would enforce the share by MPS, which cannot spill to host memory; run the share on a node with libvgpu.so or on %s", factor, elsewhere))
	case !hami:
		return field.Invalid(field.NewPath("limits", "enforcement"), enforcement, fmt.Sprintf(
			"this node oversubscribes GPU memory by %s (--memory-oversubscription) and MPS cannot spill a share to host memory; use HAMi or Auto on a node with HAMi-core's libvgpu.so (--vgpu-library), or run the share on %s", factor, elsewhere))
	case strategy == api.MPS:
		return field.Invalid(field.NewPath("sharing", "strategy"), strategy, fmt.Sprintf(
			"this node oversubscribes GPU memory by %s (--memory-oversubscription) and MPS cannot spill a share to host memory; use TimeSlicing, or run the share on %s", factor, elsewhere))
	}
	return nil
}

func (p *planner) migInstance(pub api.DeviceInfo) (*prepared.MIGInstance, error) {
	parent, start, size, profile := pub.GPUs[0], pub.MIGPlacementStart, pub.MIGPlacementSize, pub.MIGProfile
	g := p.inv.GPU(parent)
	if g == nil || g.MIG == nil {
		return nil, fmt.Errorf("MIG parent GPU %d is not MIG-capable on this node", parent)
	}
	for _, prof := range g.MIG.Profiles {
		if prof.Name == profile {
			return &prepared.MIGInstance{Parent: parent, Profile: profile, GIProfileID: prof.GIProfileID, CIProfileID: prof.CIProfileID, Start: start, Size: size}, nil
		}
	}
	return nil, fmt.Errorf("GPU %d has no MIG profile %q", parent, profile)
}

// migCapacity returns the MIG profile's memory and share of the GPU's SMs.
func (p *planner) migCapacity(mi *prepared.MIGInstance) (int64, int) {
	g := p.inv.GPU(mi.Parent)
	for _, prof := range g.MIG.Profiles {
		if prof.Name == mi.Profile && g.Multiprocessors > 0 {
			return int64(prof.MemoryBytes), prof.Multiprocessors * 100 / g.Multiprocessors
		}
	}
	return 0, 0
}

// conflict reports whether two prepared devices of different claims may not coexist:
// shares of a GPU coexist, MIG instances coexist when their placements are disjoint,
// anything else on the same GPU excludes the other.
func conflict(a, b prepared.Device) bool {
	for _, ga := range a.GPUs {
		for _, gb := range b.GPUs {
			if ga != gb {
				continue
			}
			switch {
			case a.Type == api.TypeShare && b.Type == api.TypeShare:
			case a.MIG != nil && b.MIG != nil:
				if a.MIG.Start < b.MIG.Start+b.MIG.Size && b.MIG.Start < a.MIG.Start+a.MIG.Size {
					return true
				}
			default:
				return true
			}
		}
	}
	return false
}

// maxShareMemory bounds a share's memory far above any GPU's (1 PiB), so that no consumed
// capacity overflows the limits made of it.
var maxShareMemory = *resource.NewQuantity(1<<50, resource.BinarySI)

// cdiGPU is g as its CDI device sees it: an AMD or Hygon GPU with its DRM nodes.
func cdiGPU(g *driver.GPU) cdi.GPU {
	out := cdi.GPU{Index: g.Index, Minor: g.Minor, UUID: g.UUID}
	if k := g.KFD; k != nil {
		out.AMD = &cdi.AMDNodes{RenderMinor: k.RenderMinor, Card: k.Card, ROCmUUID: k.WholeUUID}
	}
	return out
}

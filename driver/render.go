package driver

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// DeviceType is a published device's "type" attribute ("" when it has none), as
// api.DeviceType reads it.
func DeviceType(d resourceapi.Device) string { return api.DeviceType(&d) }

// MIGStrategy says which MIG devices a node publishes.
type MIGStrategy string

const (
	// MIGStatic (the default) follows each GPU's MIG layout as the operator (or NVIDIA's
	// mig-manager) set it: a GPU whose MIG mode is enabled publishes the MIG instances that
	// exist on it, and nothing else; the others publish whole, shared and grouped use. The
	// plugin hands an existing instance to a claim and never creates or destroys one.
	MIGStatic MIGStrategy = "static"
	// MIGDynamic publishes whole GPUs and every MIG profile × placement of MIG-capable
	// GPUs; counters keep them exclusive and the plugin switches MIG mode and creates
	// instances at prepare. It multiplies the devices a node publishes (8 × H100: 247
	// instead of 23), which every scheduling decision on that node pays for.
	MIGDynamic MIGStrategy = "dynamic"
	// MIGNone publishes no MIG devices.
	MIGNone MIGStrategy = "none"
)

// MIGStrategies lists the accepted MIGStrategy values.
var MIGStrategies = []MIGStrategy{MIGStatic, MIGDynamic, MIGNone}

// Publication says which kinds of devices a node pool publishes: every kind, or fewer so
// that every scheduling decision on the pool's nodes costs less (docs/devices.md, Node
// pools).
type Publication string

const (
	// PublishAll (the default) publishes whole GPUs, shares, NVLink and XGMI groups and
	// the MIG devices the MIG strategy asks for.
	PublishAll Publication = "all"
	// PublishTraining publishes whole GPUs and NVLink and XGMI groups: no shares, no MIG
	// devices. A pool for multi-GPU training, where every node a one-GPU pod cannot use costs the
	// scheduler a look at each of its shares.
	PublishTraining Publication = "training"
	// PublishWhole publishes whole GPUs only, without counters (nothing else uses a GPU
	// to count against): what the scheduler sees is a plain driver's slices.
	PublishWhole Publication = "whole"
)

// Publications lists the accepted Publication values.
var Publications = []Publication{PublishAll, PublishTraining, PublishWhole}

// Options sets what the publication leaves out in o: shares and MIG devices for
// training, shares, MIG devices and NVLink and XGMI groups for whole. A publication
// without MIG devices refuses a MIG strategy other than none or the default (static).
func (p Publication) Options(o RenderOptions) (RenderOptions, error) {
	switch p {
	case "", PublishAll:
		return o, nil
	case PublishTraining, PublishWhole:
	default:
		return o, fmt.Errorf("publication %q: accepted values are %s, %s, %s", p, PublishAll, PublishTraining, PublishWhole)
	}
	if o.MIG == MIGDynamic {
		return o, fmt.Errorf("publication %q publishes no MIG devices: it takes mig strategy %s or %s, not %s", p, MIGStatic, MIGNone, o.MIG)
	}
	o.MIG, o.NoShares = MIGNone, true
	o.NoGroups = o.NoGroups || p == PublishWhole
	return o, nil
}

// RenderOptions controls what a node publishes. The zero value is the default.
type RenderOptions struct {
	// MIG is the MIG strategy; "" means MIGStatic.
	MIG MIGStrategy
	// NoShares stops publishing a shareable device per GPU.
	NoShares bool
	// NoGroups stops publishing NVLink and XGMI group devices.
	NoGroups bool
	// Taints, keyed by GPU index, go on every device that uses that GPU: the whole GPU,
	// its share, its MIG devices and the NVLink and XGMI groups containing it (a device keeps at
	// most resourceapi.DeviceTaintsMaxLength distinct taints). The plugin takes an
	// unhealthy GPU out of scheduling this way.
	Taints map[int][]resourceapi.DeviceTaint
	// MemoryOversubscription, from 1 to MaxMemoryOversubscription, multiplies the memory
	// capacity of each GPU's share, so the shares of one GPU may together ask for more
	// memory than the card has (the kubelet plugin prepares such shares under HAMi-core
	// only). 0 and 1 leave it at the card's memory. Whole GPUs, MIG devices and NVLink
	// groups keep theirs.
	MemoryOversubscription float64
}

// MaxMemoryOversubscription is the largest accepted RenderOptions.MemoryOversubscription.
const MaxMemoryOversubscription = 4.0

// Validate checks the options, naming the accepted values.
func (o RenderOptions) Validate() error {
	switch o.MIG {
	case "", MIGDynamic, MIGStatic, MIGNone:
	default:
		return fmt.Errorf("mig strategy %q: accepted values are %s, %s, %s", o.MIG, MIGStatic, MIGDynamic, MIGNone)
	}
	if f := o.MemoryOversubscription; f != 0 && !(f >= 1 && f <= MaxMemoryOversubscription) {
		return fmt.Errorf("memory oversubscription %v: accepted range is 1 to %v (1: off)", f, MaxMemoryOversubscription)
	}
	return nil
}

// memoryOversubscriptionPPM is the memory oversubscription factor in millionths (1000000:
// none), so that capacities come out exact for factors such as 1.1.
func (o RenderOptions) memoryOversubscriptionPPM() uint64 {
	if o.MemoryOversubscription <= 1 {
		return 1_000_000
	}
	return uint64(math.Round(o.MemoryOversubscription * 1_000_000))
}

// Share request policy: memory in MiB steps from 256 MiB, compute in whole percent.
// A share that asks for no compute gets no SM cap and reserves none (time-sliced).
var (
	ShareMemoryMin     = resource.MustParse("256Mi")
	ShareMemoryStep    = resource.MustParse("1Mi")
	ShareMemoryDefault = resource.MustParse("1Gi")
	ShareComputeMax    = resource.MustParse("100")
	ShareComputeMin    = resource.MustParse("0")
	ShareComputeStep   = resource.MustParse("1")
)

// maxDevicesPerSlice is the API limit for slices whose devices consume counters.
const maxDevicesPerSlice = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures

// Pool is what one node publishes: slices of devices plus slices of shared counters.
type Pool struct {
	Slices []resourceslice.Slice
}

// Render turns an inventory into the node's pool. Each GPU has counters (one per MIG
// memory slice when it publishes MIG devices, else one) that every device using the GPU
// consumes — whole GPU, share (taken once for all its shares), MIG placement (its
// slices), NVLink or XGMI group (all of each member's) — so the scheduler never hands out
// one GPU twice.
func Render(inv *Inventory, opts RenderOptions) (*Pool, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.MIG == "" {
		opts.MIG = MIGStatic
	}
	counters := planCounters(inv, opts)
	var whole, groups, shares, migs []resourceapi.Device
	usable := map[int]bool{} // GPUs whose non-MIG use is published
	for k := range inv.GPUs {
		g := &inv.GPUs[k]
		if opts.MIG != MIGStatic || !g.migMode() {
			usable[g.Index] = true
			whole = append(whole, opts.tainted(gpuDevice(inv, g, counters), g.Index))
			// Nothing enforces a share's limits on AMD and Hygon GPUs: they are used whole.
			if !opts.NoShares && g.IsNVIDIA() {
				shares = append(shares, opts.tainted(shareDevice(inv, g, counters, opts.memoryOversubscriptionPPM()), g.Index))
			}
		}
		if opts.publishesMIG(g) {
			for _, d := range migDevices(inv, g, counters, opts.MIG) {
				migs = append(migs, opts.tainted(d, g.Index))
			}
		}
	}
	if !opts.NoGroups {
		type ranked struct {
			dev         resourceapi.Device
			first, size int // lowest member index, members
		}
		var rs []ranked
		for _, gr := range inv.NVLink.Groups() {
			if d, ok := groupDevice(inv, gr, counters, usable); ok {
				members := make([]int, len(gr.Members))
				for k, pos := range gr.Members {
					members[k] = inv.GPUs[pos].Index
				}
				rs = append(rs, ranked{opts.tainted(d, members...), slices.Min(members), len(members)})
			}
		}
		for _, members := range inv.XGMIGroups() {
			if d, ok := xgmiGroupDevice(inv, members, counters, usable); ok {
				idx := inv.indices(members)
				rs = append(rs, ranked{opts.tainted(d, idx...), slices.Min(idx), len(idx)})
			}
		}
		// A group request walks past every group before the first that fits, two CEL
		// evaluations each (class and request). Ordered by lowest member, then size, the
		// first free GPUs' pair, quad and board come first: on an empty H100 node a
		// 4-GPU request looks at 2 groups instead of 5.
		slices.SortStableFunc(rs, func(a, b ranked) int {
			return cmp.Or(cmp.Compare(a.first, b.first), cmp.Compare(a.size, b.size))
		})
		for _, r := range rs {
			groups = append(groups, r.dev)
		}
	}
	pool := &Pool{}
	if len(shares)+len(groups)+len(migs) == 0 {
		// Whole GPUs alone never take one GPU twice: without counters the scheduler reads
		// one slice instead of two and checks no counter per allocation.
		for k := range whole {
			whole[k].ConsumesCounters = nil
		}
		counters.sets = nil
	}
	for _, sets := range chunk(counters.sets, resourceapi.ResourceSliceMaxCounterSets) {
		pool.Slices = append(pool.Slices, resourceslice.Slice{SharedCounters: sets})
	}
	// Order matters for scheduling cost: the allocator walks devices in order and takes
	// the first that fits, so the most common requests find their devices first.
	all := append(append(append(whole, shares...), groups...), migs...)
	for _, devs := range chunk(all, maxDevicesPerSlice) {
		pool.Slices = append(pool.Slices, resourceslice.Slice{Devices: devs})
	}
	return pool, nil
}

// DriverResources wraps the pool for the kubelet plugin library (one pool per node,
// named after the node).
func (p *Pool) DriverResources(nodeName string) resourceslice.DriverResources {
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{nodeName: {Slices: p.Slices}}}
}

// ResourceSlices renders the pool as the ResourceSlice objects the plugin publishes,
// named the way inspection shows them (the API server's names carry a random suffix).
func (p *Pool) ResourceSlices(nodeName string, generation int64) []*resourceapi.ResourceSlice {
	out := make([]*resourceapi.ResourceSlice, 0, len(p.Slices))
	for k, s := range p.Slices {
		spec := resourceapi.ResourceSliceSpec{
			Driver: api.DriverName,
			Pool: resourceapi.ResourcePool{
				Name:               nodeName,
				Generation:         generation,
				ResourceSliceCount: int64(len(p.Slices)),
			},
			NodeName:       ptr.To(nodeName),
			SharedCounters: s.SharedCounters,
			Devices:        s.Devices,
		}
		out = append(out, &resourceapi.ResourceSlice{
			TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceSlice"},
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", nodeName, strings.ReplaceAll(api.DriverName, ".", "-"), k)},
			Spec:       spec,
		})
	}
	return out
}

// tainted gives d the taints of the GPUs it uses, each distinct taint once.
func (o RenderOptions) tainted(d resourceapi.Device, gpus ...int) resourceapi.Device {
	for _, g := range gpus {
		for _, t := range o.Taints[g] {
			if len(d.Taints) < resourceapi.DeviceTaintsMaxLength && !slices.ContainsFunc(d.Taints, func(have resourceapi.DeviceTaint) bool {
				return have.Key == t.Key && have.Value == t.Value && have.Effect == t.Effect
			}) {
				d.Taints = append(d.Taints, t)
			}
		}
	}
	return d
}

func chunk[T any](items []T, n int) [][]T {
	var out [][]T
	for len(items) > 0 {
		k := min(n, len(items))
		out = append(out, items[:k])
		items = items[k:]
	}
	return out
}

// counterPlan places each GPU's counters in a counter set.
type counterPlan struct {
	sets  []resourceapi.CounterSet
	setOf map[int]string   // GPU index → counter set name
	names map[int][]string // GPU index → its counter names
	// limits are the counters that hold a MIG profile to fewer instances than it has
	// placements (the "+me" profiles, one per GPU): GPU index → profile → counter.
	limits map[int]map[string]limitCounter
}

// limitCounter is a counter of a MIG profile's instances on one GPU.
type limitCounter struct{ set, name string }

// planCounters gives every GPU that publishes MIG devices one counter per MIG memory
// slice, every other GPU a single counter, and packs consecutive GPUs into sets of at
// most 32 counters, so an NVLink group of up to 8 MIG-capable GPUs spans at most two sets.
// A GPU without MIG devices needs no more than one counter to keep its whole, shared and
// grouped use exclusive, and every counter a device consumes costs the scheduler time on
// every decision for the node (the allocator converts and checks each one).
func planCounters(inv *Inventory, opts RenderOptions) counterPlan {
	plan := counterPlan{setOf: map[int]string{}, names: map[int][]string{}}
	per := 1
	for k := range inv.GPUs {
		if g := &inv.GPUs[k]; opts.publishesMIG(g) {
			per = max(per, g.MIG.MemorySlices)
		}
	}
	perSet := max(1, resourceapi.ResourceSliceMaxCountersPerCounterSet/per)
	for start := 0; start < len(inv.GPUs); start += perSet {
		members := inv.GPUs[start:min(start+perSet, len(inv.GPUs))]
		set := resourceapi.CounterSet{
			Name:     fmt.Sprintf("gpus-%d-%d", members[0].Index, members[len(members)-1].Index),
			Counters: map[string]resourceapi.Counter{},
		}
		for k := range members {
			g := &members[k]
			var names []string
			if opts.publishesMIG(g) {
				for s := range g.MIG.MemorySlices {
					names = append(names, fmt.Sprintf("gpu%d-slice%d", g.Index, s))
				}
			} else {
				names = []string{fmt.Sprintf("gpu%d", g.Index)}
			}
			for _, n := range names {
				set.Counters[n] = resourceapi.Counter{Value: resource.MustParse("1")}
			}
			plan.names[g.Index] = names
			plan.setOf[g.Index] = set.Name
		}
		plan.sets = append(plan.sets, set)
	}
	if opts.MIG == MIGDynamic {
		planLimits(inv, opts, &plan)
	}
	return plan
}

// planLimits gives each MIG profile that a GPU holds fewer instances of than it has
// placements (NVML's instance count: one "1g.10gb+me" per GPU) a counter of that many,
// which each of its placements consumes, in sets of their own after the GPUs' sets: a
// dynamic MIG device then consumes from two sets at most, its GPU's and its limit's.
func planLimits(inv *Inventory, opts RenderOptions, plan *counterPlan) {
	plan.limits = map[int]map[string]limitCounter{}
	var set *resourceapi.CounterSet
	for k := range inv.GPUs {
		g := &inv.GPUs[k]
		if !opts.publishesMIG(g) {
			continue
		}
		for _, p := range g.MIG.Profiles {
			if p.InstanceLimit() >= len(p.Placements) {
				continue
			}
			if set == nil || len(set.Counters) == resourceapi.ResourceSliceMaxCountersPerCounterSet {
				plan.sets = append(plan.sets, resourceapi.CounterSet{
					Name:     fmt.Sprintf("mig-limits-%d", len(plan.sets)),
					Counters: map[string]resourceapi.Counter{},
				})
				set = &plan.sets[len(plan.sets)-1]
			}
			name := fmt.Sprintf("gpu%d-%s", g.Index, profileLabel.Replace(p.Name))
			set.Counters[name] = resourceapi.Counter{Value: *resource.NewQuantity(int64(p.InstanceLimit()), resource.DecimalSI)}
			if plan.limits[g.Index] == nil {
				plan.limits[g.Index] = map[string]limitCounter{}
			}
			plan.limits[g.Index][p.Name] = limitCounter{set: set.Name, name: name}
		}
	}
}

// publishesMIG says whether GPU g's MIG devices are published: every MIG-capable GPU
// with dynamic MIG, those whose MIG mode is enabled with static MIG (the default), which
// publish their existing instances.
func (o RenderOptions) publishesMIG(g *GPU) bool {
	switch o.MIG {
	case MIGDynamic:
		return g.MIG != nil
	case MIGStatic, "":
		return g.migMode()
	}
	return false
}

// consume builds consumesCounters entries taking the named counters of the given GPUs.
// ok is false when they span more counter sets than a device may consume from.
func (p counterPlan) consume(take map[int][]string) ([]resourceapi.DeviceCounterConsumption, bool) {
	bySet := map[string]map[string]resourceapi.Counter{}
	var order []string
	for _, set := range p.sets { // deterministic order
		for gpu, names := range take {
			if p.setOf[gpu] != set.Name {
				continue
			}
			if bySet[set.Name] == nil {
				bySet[set.Name] = map[string]resourceapi.Counter{}
				order = append(order, set.Name)
			}
			for _, n := range names {
				bySet[set.Name][n] = resourceapi.Counter{Value: resource.MustParse("1")}
			}
		}
	}
	if len(order) > resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice {
		return nil, false
	}
	out := make([]resourceapi.DeviceCounterConsumption, 0, len(order))
	for _, s := range order {
		out = append(out, resourceapi.DeviceCounterConsumption{CounterSet: s, Counters: bySet[s]})
	}
	return out, true
}

func (p counterPlan) wholeGPU(index int) []resourceapi.DeviceCounterConsumption {
	c, _ := p.consume(map[int][]string{index: p.names[index]})
	return c
}

// GPUDeviceName, ShareDeviceName, MIGDeviceName and GroupDeviceName (an NVLink group's)
// are the published device names (DNS labels).
func GPUDeviceName(index int) string   { return fmt.Sprintf("gpu-%d", index) }
func ShareDeviceName(index int) string { return fmt.Sprintf("gpu-%d-share", index) }
func MIGDeviceName(index int, profile string, start int) string {
	return fmt.Sprintf("gpu-%d-mig-%s-%d", index, profileLabel.Replace(profile), start)
}
func GroupDeviceName(members []int) string { return "nvlink-" + topology.JoinIndices(members, "-") }

// XGMIGroupDeviceName is the name of the XGMI group of the given GPUs ("xgmi-0-1-2-3").
func XGMIGroupDeviceName(members []int) string { return "xgmi-" + topology.JoinIndices(members, "-") }

// profileLabel writes a MIG profile's name in a DNS label ("1g.10gb+me": "1g10gb-me").
var profileLabel = strings.NewReplacer(".", "", "+", "-")

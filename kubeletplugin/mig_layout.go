package kubeletplugin

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/discover"
	"github.com/gpudra/gpudra/driver/miglayout"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// Reasons of the Events on the Node about its MIG layout (the gpu.gpudra.dev/mig-config
// label).
const (
	// ReasonMIGLayoutApplied: every GPU the layout selects is partitioned as it says.
	ReasonMIGLayoutApplied = "MIGLayoutApplied"
	// ReasonMIGLayoutPending: GPUs that prepared claims use wait for the claims to go.
	ReasonMIGLayoutPending = "MIGLayoutPending"
	// ReasonMIGLayoutFailed: the layout is not applied (unknown, impossible on a GPU, a
	// failed NVML call, not --mig=static).
	ReasonMIGLayoutFailed = "MIGLayoutFailed"
)

// migLayouts applies the MIG layout the Node's gpu.gpudra.dev/mig-config label names,
// from the layouts in Config.MIGLayoutsFile, and reports on the Node how it goes.
type migLayouts struct {
	d *Driver
	// reported is the state and message last reported, so that each is logged and
	// recorded as an Event once.
	reported string
	// migManager says that the node's nvidia.com/mig.config label has been logged.
	migManager bool
}

// startMIGLayouts follows the Node's MIG layout label every Config.MIGLayoutInterval
// until ctx ends, when the plugin has a layouts file and an API server.
func (d *Driver) startMIGLayouts(ctx context.Context) {
	if d.cfg.MIGLayoutsFile == "" || d.cfg.Client == nil {
		return
	}
	l := &migLayouts{d: d}
	d.health.watchers.Go(func() {
		t := time.NewTicker(cmp.Or(d.cfg.MIGLayoutInterval, defaultMIGLayoutInterval))
		defer t.Stop()
		for {
			l.reconcile(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
}

// reconcile reads the Node's labels and applies the layout it names.
func (l *migLayouts) reconcile(ctx context.Context) {
	d := l.d
	logger := klog.FromContext(ctx)
	node, err := d.cfg.Client.CoreV1().Nodes().Get(ctx, d.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		if ctx.Err() == nil {
			logger.Error(err, "Reading the Node for its MIG layout label failed", "node", d.cfg.NodeName)
		}
		return
	}
	name := node.Labels[api.LabelMIGConfig]
	if name == "" {
		l.reported = ""
		return
	}
	if owner, ok := node.Labels[api.LabelNVIDIAMIGConfig]; ok {
		if !l.migManager {
			logger.Info("The node carries NVIDIA mig-manager's MIG layout label: mig-manager owns the MIG layout and gpudra applies none",
				"label", api.LabelNVIDIAMIGConfig, "value", owner, "ignored", api.LabelMIGConfig+"="+name)
			l.migManager = true
		}
		return
	}
	l.migManager = false
	if strategy := cmp.Or(d.cfg.Render.MIG, driver.MIGStatic); strategy != driver.MIGStatic {
		l.report(ctx, node, api.MIGConfigFailed, ReasonMIGLayoutFailed,
			fmt.Sprintf("MIG layout %q is not applied: with --mig=%s the plugin creates a MIG instance for each claim; layouts apply with --mig=static", name, strategy))
		return
	}
	data, err := os.ReadFile(d.cfg.MIGLayoutsFile)
	if err != nil {
		l.report(ctx, node, api.MIGConfigFailed, ReasonMIGLayoutFailed, fmt.Sprintf("MIG layout %q is not applied: reading the layouts: %v", name, err))
		return
	}
	file, err := miglayout.Parse(data)
	if err != nil {
		l.report(ctx, node, api.MIGConfigFailed, ReasonMIGLayoutFailed, fmt.Sprintf("MIG layout %q is not applied: %s: %v", name, d.cfg.MIGLayoutsFile, err))
		return
	}
	entries, err := file.Layout(name)
	if err != nil {
		l.report(ctx, node, api.MIGConfigFailed, ReasonMIGLayoutFailed, fmt.Sprintf("MIG layout %q is not applied: %v", name, err))
		return
	}
	res, err := d.applyMIGLayout(ctx, name, entries)
	switch {
	case err != nil:
		l.report(ctx, node, api.MIGConfigFailed, ReasonMIGLayoutFailed, err.Error())
	case len(res.pending) > 0:
		var waits []string
		for _, gpu := range slices.Sorted(maps.Keys(res.pending)) {
			waits = append(waits, fmt.Sprintf("GPU %d (claims %s)", gpu, strings.Join(res.pending[gpu], ", ")))
		}
		l.report(ctx, node, api.MIGConfigPending, ReasonMIGLayoutPending,
			fmt.Sprintf("MIG layout %q waits for prepared claims to go from %s; the node's other GPUs have it", name, strings.Join(waits, ", ")))
	default:
		l.report(ctx, node, api.MIGConfigSuccess, ReasonMIGLayoutApplied, fmt.Sprintf("MIG layout %q applied: %s", name, res.summary()))
	}
}

// report sets the Node's state label and, when state or message changed, logs them and
// records an Event on the Node.
func (l *migLayouts) report(ctx context.Context, node *corev1.Node, state, reason, message string) {
	d := l.d
	logger := klog.FromContext(ctx)
	if node.Labels[api.LabelMIGConfigState] != state {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{api.LabelMIGConfigState: state}}})
		if _, err := d.cfg.Client.CoreV1().Nodes().Patch(ctx, d.cfg.NodeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			logger.Error(err, "Setting the Node's MIG layout state label failed", "label", api.LabelMIGConfigState, "state", state)
		}
	}
	if key := state + "\x00" + message; key != l.reported {
		l.reported = key
		eventType := corev1.EventTypeNormal
		if state == api.MIGConfigFailed {
			eventType = corev1.EventTypeWarning
			logger.Error(nil, "MIG layout not applied", "layout", node.Labels[api.LabelMIGConfig], "reason", message)
		} else {
			logger.Info("MIG layout", "layout", node.Labels[api.LabelMIGConfig], "state", state, "message", message)
		}
		d.health.events.eventf(eventType, reason, "%s", message)
	}
}

// migLayoutResult is what applying a layout did.
type migLayoutResult struct {
	// layouts are the GPUs the layout selects, with their MIG devices.
	layouts map[int][]string
	// pending are the GPUs that wait, with the prepared claims that use them.
	pending map[int][]string
}

func (r migLayoutResult) summary() string {
	var out []string
	for _, gpu := range slices.Sorted(maps.Keys(r.layouts)) {
		profiles := r.layouts[gpu]
		if profiles == nil {
			out = append(out, fmt.Sprintf("GPU %d MIG disabled", gpu))
			continue
		}
		counts := map[string]int{}
		for _, p := range profiles {
			counts[p]++
		}
		var parts []string
		for _, p := range slices.Sorted(maps.Keys(counts)) {
			parts = append(parts, fmt.Sprintf("%d×%s", counts[p], p))
		}
		if len(parts) == 0 {
			parts = []string{"MIG enabled, no instances"}
		}
		out = append(out, fmt.Sprintf("GPU %d %s", gpu, strings.Join(parts, " ")))
	}
	if len(out) == 0 {
		return "it selects none of the node's GPUs"
	}
	return strings.Join(out, ", ")
}

// gpuLayout is a GPU's layout: its MIG mode and the instances to make, placed.
type gpuLayout struct {
	gpu       *driver.GPU
	enabled   bool
	profiles  []string
	instances []MIGInstance
}

// applyMIGLayout partitions each GPU the layout selects as it says, except the GPUs
// that prepared claims use (pending), and publishes the node's devices again. A layout
// that some GPU cannot hold is refused whole, nothing changed.
func (d *Driver) applyMIGLayout(ctx context.Context, name string, entries []miglayout.Entry) (migLayoutResult, error) {
	logger := klog.FromContext(ctx)
	res := migLayoutResult{layouts: map[int][]string{}, pending: map[int][]string{}}
	s := d.state
	unlock, err := s.lock()
	if err != nil {
		return res, err
	}
	inv := s.planner.inv
	var plans []gpuLayout
	var refused []string
	for k := range inv.GPUs {
		g := &inv.GPUs[k]
		sel, err := d.layoutGPU(g)
		if err != nil {
			unlock()
			return res, fmt.Errorf("MIG layout %q is not applied: %w", name, err)
		}
		e, ok := miglayout.Select(entries, sel)
		if !ok {
			continue
		}
		p, err := planGPULayout(g, e)
		if err != nil {
			refused = append(refused, err.Error())
			continue
		}
		plans = append(plans, p)
	}
	if len(refused) > 0 {
		unlock()
		return res, fmt.Errorf("MIG layout %q is refused and nothing was changed: %s", name, strings.Join(refused, "; "))
	}
	users := s.gpuUsers()
	views := map[int]migView{}
	var failed []string
	for _, p := range plans {
		g := p.gpu
		res.layouts[g.Index] = p.profiles
		if g.MIG == nil { // not MIG-capable, and the layout leaves MIG off
			continue
		}
		current, err := readMIGView(d.cfg.Backend, g)
		if err != nil {
			failed = append(failed, err.Error())
			continue
		}
		if current.has(p) {
			if g.MIG.Enabled != current.enabled || !slices.Equal(instanceNames(g.MIG.Instances), instanceNames(current.instances)) {
				views[g.Index] = current
			}
			continue
		}
		if claims := users[g.Index]; len(claims) > 0 {
			res.pending[g.Index] = claims
			continue
		}
		logger.Info("Applying the MIG layout to a GPU", "layout", name, "gpu", g.Index,
			"before", instanceNames(current.instances), "migEnabled", p.enabled, "profiles", p.profiles)
		if err := s.realizeGPULayout(p); err != nil {
			failed = append(failed, err.Error())
		}
		now, err := readMIGView(d.cfg.Backend, g)
		if err != nil {
			failed = append(failed, err.Error())
			continue
		}
		views[g.Index] = now
	}
	var applyErr error
	if len(failed) > 0 {
		applyErr = fmt.Errorf("MIG layout %q failed: %s", name, strings.Join(failed, "; "))
	}
	if len(views) == 0 {
		unlock()
		return res, applyErr
	}
	if err := d.publishMIGViews(ctx, unlock, views); err != nil {
		return res, fmt.Errorf("republishing the node's devices after applying MIG layout %q: %w", name, err)
	}
	return res, applyErr
}

// layoutGPU is what layouts select g by: its index, PCI IDs and product name.
func (d *Driver) layoutGPU(g *driver.GPU) (miglayout.GPU, error) {
	out := miglayout.GPU{Index: g.Index, ProductName: g.ProductName}
	dev, ret := d.cfg.Backend.NVML.DeviceGetHandleByUUID(g.UUID)
	if ret != nvml.SUCCESS {
		return out, fmt.Errorf("GPU %d: DeviceGetHandleByUUID: %v", g.Index, ret)
	}
	pci, ret := dev.GetPciInfo()
	if ret != nvml.SUCCESS {
		return out, fmt.Errorf("GPU %d: GetPciInfo: %v", g.Index, ret)
	}
	out.PCIDeviceID, out.PCISubsystemID = pci.PciDeviceId, pci.PciSubSystemId
	return out, nil
}

// planGPULayout places the entry's MIG devices on g, or says why g cannot hold them.
func planGPULayout(g *driver.GPU, e miglayout.Entry) (gpuLayout, error) {
	p := gpuLayout{gpu: g, enabled: e.MIGEnabled}
	where := fmt.Sprintf("GPU %d (%s)", g.Index, g.ProductName)
	if !e.MIGEnabled {
		return p, nil
	}
	if g.MIG == nil {
		return p, fmt.Errorf("%s is not MIG-capable", where)
	}
	p.profiles = e.Profiles()
	if p.profiles == nil {
		p.profiles = []string{}
	}
	offered := map[string]driver.MIGProfile{}
	maxCompute := 0
	var names []string
	for _, mp := range g.MIG.Profiles {
		offered[mp.Name] = mp
		names = append(names, mp.Name)
		maxCompute = max(maxCompute, mp.ComputeSlices)
	}
	compute := 0
	for _, name := range slices.Compact(slices.Clone(p.profiles)) {
		if _, ok := offered[name]; !ok {
			return p, fmt.Errorf("%s does not offer MIG profile %s (it offers %s)", where, name, strings.Join(names, ", "))
		}
	}
	for _, name := range p.profiles {
		compute += offered[name].ComputeSlices
	}
	if compute > maxCompute {
		return p, fmt.Errorf("%s cannot hold %s: they need %d compute slices, the GPU has %d", where, strings.Join(p.profiles, " "), compute, maxCompute)
	}
	used := make([]bool, g.MIG.MemorySlices)
	placed := make([]MIGInstance, len(p.profiles))
	var place func(k int) bool
	place = func(k int) bool {
		if k == len(p.profiles) {
			return true
		}
		mp := offered[p.profiles[k]]
		for _, pl := range slices.Backward(mp.Placements) { // the highest free placement first, as mig-manager
			if pl.Start+pl.Size > len(used) || slices.Contains(used[pl.Start:pl.Start+pl.Size], true) {
				continue
			}
			for i := pl.Start; i < pl.Start+pl.Size; i++ {
				used[i] = true
			}
			placed[k] = MIGInstance{Parent: g.Index, Profile: mp.Name, GIProfileID: mp.GIProfileID, CIProfileID: mp.CIProfileID, Start: pl.Start, Size: pl.Size}
			if place(k + 1) {
				return true
			}
			for i := pl.Start; i < pl.Start+pl.Size; i++ {
				used[i] = false
			}
		}
		return false
	}
	if !place(0) {
		return p, fmt.Errorf("%s cannot hold %s: no placement of them fits its %d memory slices", where, strings.Join(p.profiles, " "), g.MIG.MemorySlices)
	}
	p.instances = placed
	return p, nil
}

// readMIGView reads g's MIG mode and instances from NVML.
func readMIGView(b *discover.Backend, g *driver.GPU) (migView, error) {
	dev, ret := b.NVML.DeviceGetHandleByUUID(g.UUID)
	if ret != nvml.SUCCESS {
		return migView{}, fmt.Errorf("GPU %d: DeviceGetHandleByUUID: %v", g.Index, ret)
	}
	mode, _, ret := dev.GetMigMode()
	if ret != nvml.SUCCESS {
		return migView{}, fmt.Errorf("GPU %d: GetMigMode: %v", g.Index, ret)
	}
	v := migView{enabled: mode == nvml.DEVICE_MIG_ENABLE}
	if !v.enabled {
		return v, nil
	}
	list, err := discover.MIGInstances(b, g)
	if err != nil {
		return migView{}, err
	}
	v.instances = list
	return v, nil
}

// has says whether the GPU is partitioned as p says already.
func (v migView) has(p gpuLayout) bool {
	if v.enabled != p.enabled {
		return false
	}
	if !v.enabled {
		return true
	}
	var now []string
	for _, in := range v.instances {
		if !in.Full {
			return false
		}
		now = append(now, in.Profile)
	}
	slices.Sort(now)
	want := slices.Sorted(slices.Values(p.profiles))
	return slices.Equal(now, want)
}

// gpuUsers are the GPUs prepared claims use, with the claims; s is locked.
func (s *state) gpuUsers() map[int][]string {
	out := map[int][]string{}
	for _, pc := range s.cp.Claims {
		ref := klog.KRef(pc.Namespace, pc.Name).String()
		for _, dv := range pc.Devices {
			for _, gpu := range dv.GPUs {
				if !slices.Contains(out[gpu], ref) {
					out[gpu] = append(out[gpu], ref)
				}
			}
		}
	}
	for gpu := range out {
		slices.Sort(out[gpu])
	}
	return out
}

// realizeGPULayout destroys the GPU's MIG instances, sets its MIG mode and creates the
// layout's instances, as dynamic MIG creates a claim's; s is locked and no prepared
// claim uses the GPU.
func (s *state) realizeGPULayout(p gpuLayout) error {
	g := p.gpu
	m := s.mig
	m.adopt, m.hook = false, nil
	list, err := m.list(g.Index)
	if err != nil {
		return err
	}
	for _, e := range list {
		if err := destroyGPUInstance(g.Index, e); err != nil {
			return err
		}
	}
	if err := m.setMode(g.Index, p.enabled); err != nil {
		return err
	}
	dev, err := m.device(g.Index)
	if err != nil {
		return err
	}
	if current, pending, ret := dev.GetMigMode(); ret != nvml.SUCCESS {
		return fmt.Errorf("GPU %d: GetMigMode: %v", g.Index, ret)
	} else if (current == nvml.DEVICE_MIG_ENABLE) != p.enabled {
		return fmt.Errorf("GPU %d: the MIG mode change is pending (current %d, pending %d): the GPU needs a reset with no process using it", g.Index, current, pending)
	}
	for k := range p.instances {
		if _, err := m.create(&p.instances[k]); err != nil {
			return err
		}
	}
	return nil
}

// destroyGPUInstance destroys a GPU instance with all its compute instances, of any
// compute instance profile.
func destroyGPUInstance(gpu int, e existing) error {
	for ciProfile := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		info, ret := e.gi.GetComputeInstanceProfileInfo(ciProfile, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			continue
		}
		cis, ret := e.gi.GetComputeInstances(&info)
		if ret != nvml.SUCCESS {
			continue
		}
		for _, ci := range cis {
			if ret := ci.Destroy(); ret != nvml.SUCCESS {
				return fmt.Errorf("GPU %d: destroying a compute instance of the GPU instance at %d: %v", gpu, e.start, ret)
			}
		}
	}
	if ret := e.gi.Destroy(); ret != nvml.SUCCESS {
		return fmt.Errorf("GPU %d: destroying the GPU instance at %d: %v", gpu, e.start, ret)
	}
	return nil
}

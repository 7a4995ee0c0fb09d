package kubeletplugin

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
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
	"k8s.io/utils/clock"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/discover"
	"github.com/gpudra/gpudra/driver/miglayout"
	"github.com/gpudra/gpudra/kubeletplugin/internal/loop"

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
	// failed is the last layout whose apply failed (rolled back), and when it may be tried
	// again: a layout that fails again waits twice as long, up to maxMIGLayoutBackoff, so a
	// GPU that refuses it is not repartitioned and restored on every pass.
	failed struct {
		key   string // the label's layout and the layouts file it was read from
		retry time.Time
		wait  time.Duration
	}
}

// maxMIGLayoutBackoff bounds the wait before a layout that failed is tried again, unless the
// label or the layouts file change first.
const maxMIGLayoutBackoff = 10 * time.Minute

// startMIGLayouts follows the Node's MIG layout label every Config.MIGLayoutInterval
// until ctx ends, when the plugin has a layouts file and an API server.
func (d *Driver) startMIGLayouts(ctx context.Context) {
	if d.cfg.MIGLayoutsFile == "" || d.cfg.BackgroundClient == nil {
		return
	}
	l := &migLayouts{d: d}
	d.health.watchers.Go(func() {
		loop.Every(ctx, cmp.Or(d.cfg.MIGLayoutInterval, defaultMIGLayoutInterval), func(ctx context.Context) bool {
			l.reconcile(ctx)
			return false
		})
	})
}

// reconcile reads the Node's labels and applies the layout it names.
func (l *migLayouts) reconcile(ctx context.Context) {
	d := l.d
	logger := klog.FromContext(ctx)
	node, err := d.cfg.BackgroundClient.CoreV1().Nodes().Get(ctx, d.cfg.NodeName, metav1.GetOptions{})
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
	data, err := readLayouts(d.cfg.MIGLayoutsFile)
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
	now := d.clock().Now()
	key := name + "\x00" + string(data)
	if l.failed.key == key && now.Before(l.failed.retry) {
		return // failed before; the state label and the Event say so
	}
	res, err := d.applyMIGLayout(ctx, name, entries)
	if err == nil {
		l.failed.key = ""
	} else {
		wait := cmp.Or(d.cfg.MIGLayoutInterval, defaultMIGLayoutInterval)
		if l.failed.key == key {
			wait = min(2*l.failed.wait, maxMIGLayoutBackoff)
		}
		l.failed.key, l.failed.wait, l.failed.retry = key, wait, now.Add(wait)
	}
	switch {
	case err != nil:
		l.report(ctx, node, api.MIGConfigFailed, ReasonMIGLayoutFailed, err.Error())
	case len(res.pending) > 0:
		var waits []string
		for _, gpu := range slices.Sorted(maps.Keys(res.pending)) {
			if claims := res.pending[gpu]; len(claims) > 0 {
				waits = append(waits, fmt.Sprintf("GPU %d (claims %s)", gpu, strings.Join(claims, ", ")))
			} else {
				waits = append(waits, fmt.Sprintf("GPU %d (its claims went; the next pass repartitions it)", gpu))
			}
		}
		l.report(ctx, node, api.MIGConfigPending, ReasonMIGLayoutPending,
			fmt.Sprintf("MIG layout %q waits for allocated or prepared claims to go from %s; the node's other GPUs have it", name, strings.Join(waits, ", ")))
	default:
		l.report(ctx, node, api.MIGConfigSuccess, ReasonMIGLayoutApplied, fmt.Sprintf("MIG layout %q applied: %s", name, res.summary()))
	}
}

// readLayouts reads the layouts file, at most one byte more than miglayout.MaxFileBytes
// (so that Parse refuses a larger one without the whole of it in memory).
func readLayouts(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, miglayout.MaxFileBytes+1))
}

// report sets the Node's state label and, when state or message changed, logs them and
// records an Event on the Node.
func (l *migLayouts) report(ctx context.Context, node *corev1.Node, state, reason, message string) {
	d := l.d
	logger := klog.FromContext(ctx)
	if node.Labels[api.LabelMIGConfigState] != state {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{api.LabelMIGConfigState: state}}})
		if _, err := d.cfg.BackgroundClient.CoreV1().Nodes().Patch(ctx, d.cfg.NodeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
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
	// pending are the GPUs that wait, with the claims that use them.
	pending map[int][]string
	// views are the GPUs whose MIG mode or instances changed, as they are now.
	views map[int]migView
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

// clock is Config.Clock, or the real one.
func (d *Driver) clock() clock.PassiveClock {
	if d.cfg.Clock != nil {
		return d.cfg.Clock
	}
	return clock.RealClock{}
}

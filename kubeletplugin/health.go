package kubeletplugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/kubeletplugin/internal/loop"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// lostTaintValue is the taint value of a GPU that NVML reported lost.
const lostTaintValue = "gpu-lost"

// ApplicationXIDs are XIDs that the application on the GPU causes, not the GPU: they
// leave the GPU healthy (the list NVIDIA's device plugin skips by default).
var ApplicationXIDs = map[uint64]string{
	13:  "graphics engine exception (e.g. an out-of-range access in a kernel)",
	31:  "GPU memory page fault (an invalid address in the application)",
	43:  "GPU stopped processing (the application's channel was reset)",
	45:  "preemptive cleanup after an earlier error (the application was killed)",
	68:  "video processor exception",
	109: "context switch timeout",
}

// EvictingXIDs are XIDs after which running work is lost or wrong: their taint is
// NoExecute, so pods on the GPU are evicted. Other XIDs taint NoSchedule.
var EvictingXIDs = map[uint64]string{
	48: "double-bit ECC error",
	79: "GPU has fallen off the bus",
	95: "uncontained ECC error",
}

// healthEventTypes are the NVML events the plugin watches. Single-bit ECC errors are
// corrected by the hardware and left out.
const healthEventTypes uint64 = nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeGpuUnavailableError

// healthEvent is one NVML event about a GPU.
type healthEvent struct {
	GPU int
	// Type is the nvml.EventType* bit; 0 with Lost.
	Type uint64
	// XID is the XID code of an XID critical error.
	XID uint64
	// Lost is NVML's "GPU is lost" (nvml.ERROR_GPU_IS_LOST from an event wait).
	Lost bool
	At   time.Time
}

// verdict decides what an event means: its kind (a metrics label) and the taint the
// GPU's devices get, nil when the GPU stays healthy.
func verdict(ev healthEvent) (kind string, taint *resourceapi.DeviceTaint) {
	taintOf := func(value string, effect resourceapi.DeviceTaintEffect) *resourceapi.DeviceTaint {
		return &resourceapi.DeviceTaint{Key: api.TaintUnhealthy, Value: value, Effect: effect, TimeAdded: &metav1.Time{Time: ev.At}}
	}
	switch {
	case ev.Lost:
		return lostTaintValue, taintOf(lostTaintValue, resourceapi.DeviceTaintEffectNoExecute)
	case ev.Type == nvml.EventTypeXidCriticalError:
		if _, app := ApplicationXIDs[ev.XID]; app {
			return "xid", nil
		}
		effect := resourceapi.DeviceTaintEffectNoSchedule
		if _, evict := EvictingXIDs[ev.XID]; evict {
			effect = resourceapi.DeviceTaintEffectNoExecute
		}
		return "xid", taintOf(fmt.Sprintf("xid-%d", ev.XID), effect)
	case ev.Type == nvml.EventTypeDoubleBitEccError:
		return "double-bit-ecc", taintOf("double-bit-ecc", resourceapi.DeviceTaintEffectNoExecute)
	case ev.Type == nvml.EventTypeGpuUnavailableError:
		return "gpu-unavailable", taintOf("gpu-unavailable", resourceapi.DeviceTaintEffectNoExecute)
	}
	return "other", nil
}

// health is the node's GPU health: the taint of each unhealthy GPU as HealthFile holds
// it, the one source for every plugin instance on the node, so that a restarted plugin
// and both plugins of a rolling update publish the same taints. A GPU stays unhealthy
// until NVML shows it healthy again at a plugin's start (healthyAgain).
type health struct {
	mu     sync.Mutex
	store  *healthStore
	bootID string
	// uuids are the discovered GPUs' UUIDs by index, recorded with their taints.
	uuids map[int]string
	// recs holds one record per unhealthy GPU, by index: the first taint, or the first
	// that evicts. unsaved are records HealthFile could not take yet (written at the
	// next change or poll); they are in recs too.
	recs, unsaved map[int]healthRecord
	// cleared are the records that the start-up found healthy again, with why.
	cleared []clearedRecord
	// watching is true while NVML events are watched; devices are Unknown otherwise.
	watching bool
	// changed is closed and replaced whenever what WatchHealthStatus reports changes.
	changed chan struct{}
	// watchers are the goroutines watching events; Stop waits for them, so that NVML
	// is not shut down under a waiting event set.
	watchers sync.WaitGroup
	// loops are the background loops and when each last went round (probes.go).
	loops loops
	// nodeUID and events: the Node the plugin runs on, where GPU health Events go
	// (health_node.go); events is nil until Start.
	nodeUID types.UID
	events  *nodeEvents
}

// worsen records r in recs unless its GPU already has a taint as bad (NoExecute, or
// r's is not); it reports whether recs changed.
func worsen(recs map[int]healthRecord, r healthRecord) bool {
	old, unhealthy := recs[r.Index]
	if unhealthy && (old.Taint.Effect == string(resourceapi.DeviceTaintEffectNoExecute) || r.Taint.Effect != string(resourceapi.DeviceTaintEffectNoExecute)) {
		return false
	}
	recs[r.Index] = r
	return true
}

// record applies a taint to GPU gpu, in HealthFile and here. tainted reports whether
// the GPU's taint became this one; changed whether the taints to publish changed (this
// GPU's, or others' that another plugin instance wrote meanwhile). A taint HealthFile
// cannot take is kept here, and the error returned.
func (h *health) record(gpu int, taint resourceapi.DeviceTaint) (tainted, changed bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	rec := healthRecord{Index: gpu, UUID: h.uuids[gpu], BootID: h.bootID, Taint: fileTaint(taint)}
	recs, err := h.store.update(func(recs map[int]healthRecord) bool {
		for _, u := range h.unsaved {
			changed = worsen(recs, u) || changed
		}
		tainted = worsen(recs, rec)
		return tainted || changed
	})
	if err != nil {
		if !worsen(h.recs, rec) {
			return false, false, err
		}
		h.unsaved[gpu] = h.recs[gpu]
		return true, true, err
	}
	clear(h.unsaved)
	return tainted, h.take(recs), nil
}

// reload takes what another plugin instance wrote to HealthFile, and writes the
// records it could not take before. It reports whether the taints to publish changed.
func (h *health) reload() (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.unsaved) == 0 && !h.store.changed() {
		return false, nil
	}
	recs, err := h.store.update(func(recs map[int]healthRecord) bool {
		changed := false
		for _, u := range h.unsaved {
			changed = worsen(recs, u) || changed
		}
		return changed
	})
	if err != nil {
		return false, err
	}
	clear(h.unsaved)
	return h.take(recs), nil
}

// take makes recs the taints to publish; it reports whether they changed.
func (h *health) take(recs map[int]healthRecord) bool {
	same := maps.EqualFunc(h.recs, recs, func(a, b healthRecord) bool {
		return a.Index == b.Index && a.Taint.Key == b.Taint.Key && a.Taint.Value == b.Taint.Value &&
			a.Taint.Effect == b.Taint.Effect && a.Taint.Added.Equal(b.Taint.Added)
	})
	h.recs = recs
	return !same
}

// renderTaints are the taints in the form driver.Render takes.
func (h *health) renderTaints() map[int][]resourceapi.DeviceTaint {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[int][]resourceapi.DeviceTaint, len(h.recs))
	for gpu, r := range h.recs {
		out[gpu] = []resourceapi.DeviceTaint{r.Taint.device()}
	}
	return out
}

func (h *health) setWatching(on bool) {
	h.mu.Lock()
	h.watching = on
	h.mu.Unlock()
	h.notify()
}

func (h *health) notify() {
	h.mu.Lock()
	defer h.mu.Unlock()
	close(h.changed)
	h.changed = make(chan struct{})
}

// handleHealthEvent records an event, and when a GPU became (more) unhealthy
// republishes the node's slices with its devices tainted.
func (d *Driver) handleHealthEvent(ctx context.Context, ev healthEvent) {
	logger := klog.FromContext(ctx)
	kind, taint := verdict(ev)
	effect := resourceapi.DeviceTaintEffectNone
	if taint != nil {
		effect = taint.Effect
	}
	// Counted once handled, so that a count seen means the slices are republished.
	defer d.metrics.healthEvents.WithLabelValues(kind, string(effect)).Inc()
	if taint == nil {
		logger.V(2).Info("GPU event leaves the GPU healthy", "gpu", ev.GPU, "kind", kind, "xid", ev.XID, "why", ApplicationXIDs[ev.XID])
		return
	}
	tainted, changed, err := d.health.record(ev.GPU, *taint)
	if err != nil {
		logger.Error(err, "Recording the unhealthy GPU in the GPU health file failed: its taint is not kept across restarts until it is written", "gpu", ev.GPU)
	}
	if tainted {
		logger.Info("GPU is unhealthy: tainting its devices", "gpu", ev.GPU, "taint", taintString(*taint), "xid", ev.XID)
		d.health.events.unhealthy(ev.GPU, *taint, ev.XID)
		d.state.repairs.claimsEvent(ev.GPU, corev1.EventTypeWarning, ReasonGPUUnhealthy, "Taint",
			"GPU %d, which this claim uses, is unhealthy: its devices are published with the taint %s", ev.GPU, taintString(*taint))
	}
	if !changed {
		return
	}
	if err := d.republish(ctx); err != nil {
		logger.Error(err, "Republishing the node's devices with the unhealthy GPU's taint failed", "gpu", ev.GPU)
	}
	d.health.notify()
}

func taintString(t resourceapi.DeviceTaint) string {
	return t.Key + "=" + t.Value + ":" + string(t.Effect)
}

// republish renders the pool with the current taints and publishes it.
func (d *Driver) republish(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	opts := d.cfg.Render
	opts.Taints = d.health.renderTaints()
	pool, err := driver.Render(d.inventory, opts)
	if err != nil {
		return err
	}
	d.pool = pool
	d.metrics.published(pool)
	unhealthy := 0
	for gpu := range opts.Taints {
		if d.inventory.GPU(gpu) != nil {
			unhealthy++
		}
	}
	d.metrics.unhealthyGPUs.Set(float64(unhealthy))
	if d.helper == nil {
		return nil
	}
	return d.helper.PublishResources(ctx, pool.DriverResources(d.cfg.NodeName))
}

// Pool is what the plugin publishes now (with the taints of unhealthy GPUs).
func (d *Driver) Pool() *driver.Pool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pool
}

// healthResendInterval keeps the kubelet's view fresh: it treats a device's health as
// unknown after 30 s without a report.
const healthResendInterval = 10 * time.Second

// WatchHealthStatus reports every published device's health to the kubelet: Unhealthy
// with the taint as message for devices of an unhealthy GPU, Healthy for the others
// while NVML events are watched (Unknown when they cannot be), at once, on each
// change and every 10 s.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	for {
		report, changed := d.healthReport()
		select {
		case <-ctx.Done():
			return nil
		case reports <- report:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-time.After(healthResendInterval):
		}
	}
}

// healthReport is the health of every published device, and a channel closed when it
// changes.
func (d *Driver) healthReport() (kubeletplugin.DeviceHealthReport, <-chan struct{}) {
	d.health.mu.Lock()
	watching, changed := d.health.watching, d.health.changed
	d.health.mu.Unlock()
	now := time.Now()
	var report kubeletplugin.DeviceHealthReport
	for _, s := range d.Pool().Slices {
		for _, dev := range s.Devices {
			h := kubeletplugin.DeviceHealth{PoolName: d.cfg.NodeName, DeviceName: dev.Name, Health: kubeletplugin.HealthStatusHealthy, LastUpdated: now}
			var causes []string
			for _, t := range dev.Taints {
				if t.Key == api.TaintUnhealthy {
					causes = append(causes, t.Value)
				}
			}
			switch {
			case len(causes) > 0:
				h.Health, h.Message = kubeletplugin.HealthStatusUnhealthy, "GPU unhealthy: "+strings.Join(causes, ", ")
			case !watching:
				h.Health, h.Message = kubeletplugin.HealthStatusUnknown, "GPU health events are not watched"
			}
			report.Devices = append(report.Devices, h)
		}
	}
	return report, changed
}

// startHealth starts watching GPU health: NVML events, and with a simulated backend
// the lab's injection file.
func (d *Driver) startHealth(ctx context.Context) {
	logger := klog.FromContext(ctx)
	wait, err := watchNVMLHealth(d.cfg.Backend.NVML, d.inventory, logger, &d.health.loops)
	if err != nil {
		logger.Error(err, "GPU health is not watched: devices are reported with unknown health")
	} else {
		d.health.setWatching(true)
		d.health.watchers.Go(func() {
			defer d.health.setWatching(false)
			wait(ctx, func(ev healthEvent) { d.handleHealthEvent(ctx, ev) })
		})
	}
	if d.cfg.HealthInjectionFile != "" {
		d.health.watchers.Go(func() { watchInjections(ctx, d.cfg.Backend.NVML, d.cfg.HealthInjectionFile, &d.health.loops) })
	}
	d.health.watchers.Go(func() { d.followHealthFile(ctx) })
	d.health.watchers.Go(func() {
		<-ctx.Done()
		d.probes.stopped.Store(true)
	})
	if d.cfg.BackgroundClient != nil {
		d.health.events = startNodeEvents(ctx, d.cfg.BackgroundClient, d.cfg.NodeName, d.health.nodeUID, &d.health.watchers)
	}
	d.health.events.startup(d.inventory.Unreadable, d.health.cleared)
}

// healthFilePoll is how often a plugin looks for taints another instance of the node
// wrote to HealthFile.
var healthFilePoll = time.Second

// followHealthFile publishes the taints another plugin instance (a rolling update)
// writes to HealthFile, until ctx ends.
func (d *Driver) followHealthFile(ctx context.Context) {
	const name = "health-file"
	logger := klog.FromContext(ctx)
	defer d.health.loops.done(name)
	d.health.loops.beat(name)
	loop.After(ctx, healthFilePoll, func(ctx context.Context) bool {
		defer d.health.loops.beat(name)
		changed, err := d.health.reload()
		if err != nil {
			logger.Error(err, "Reading the GPU health file failed")
			return false
		}
		if !changed {
			return false
		}
		logger.Info("GPU health changed in the GPU health file (written by another plugin instance of this node): republishing")
		if err := d.republish(ctx); err != nil {
			logger.Error(err, "Republishing the node's devices with the GPU health file's taints failed")
		}
		d.health.notify()
		return false
	})
}

// taintsDropped says whether err only reports that the API server dropped device taints
// (feature gate DRADeviceTaints off): the plugin keeps running, pod status still shows
// device health, but the scheduler does not avoid the unhealthy GPUs.
func taintsDropped(err error) bool {
	var dropped *resourceslice.DroppedFieldsError
	return errors.As(err, &dropped) && slices.Equal(dropped.DisabledFeatures(), []string{"DRADeviceTaints"})
}

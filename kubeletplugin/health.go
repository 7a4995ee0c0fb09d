package kubeletplugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/driver"
)

// UnhealthyTaintKey is the device taint on every device that uses an unhealthy GPU.
// Its value names the cause: "xid-79", "double-bit-ecc", "gpu-unavailable", "gpu-lost".
const UnhealthyTaintKey = "gpu.gpudra.dev/unhealthy"

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
		return &resourceapi.DeviceTaint{Key: UnhealthyTaintKey, Value: value, Effect: effect, TimeAdded: &metav1.Time{Time: ev.At}}
	}
	switch {
	case ev.Lost:
		return "gpu-lost", taintOf("gpu-lost", resourceapi.DeviceTaintEffectNoExecute)
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

// health is the node's GPU health: the taint of each unhealthy GPU. A GPU stays
// unhealthy until the plugin restarts (after the GPU was reset or the node rebooted).
type health struct {
	mu sync.Mutex
	// taints holds one taint per unhealthy GPU: the first, or the first that evicts.
	taints map[int]resourceapi.DeviceTaint
	// watching is true while NVML events are watched; devices are Unknown otherwise.
	watching bool
	// changed is closed and replaced whenever what WatchHealthStatus reports changes.
	changed chan struct{}
	// watchers are the goroutines watching events; Stop waits for them, so that NVML
	// is not shut down under a waiting event set.
	watchers sync.WaitGroup
}

func newHealth() *health {
	return &health{taints: map[int]resourceapi.DeviceTaint{}, changed: make(chan struct{})}
}

// record applies a taint to GPU gpu; it reports whether the GPU's taint changed.
func (h *health) record(gpu int, taint resourceapi.DeviceTaint) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	old, unhealthy := h.taints[gpu]
	if unhealthy && (old.Effect == resourceapi.DeviceTaintEffectNoExecute || taint.Effect != resourceapi.DeviceTaintEffectNoExecute) {
		return false
	}
	h.taints[gpu] = taint
	return true
}

// renderTaints are the taints in the form driver.Render takes.
func (h *health) renderTaints() map[int][]resourceapi.DeviceTaint {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[int][]resourceapi.DeviceTaint, len(h.taints))
	for gpu, t := range h.taints {
		out[gpu] = []resourceapi.DeviceTaint{t}
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
	if !d.health.record(ev.GPU, *taint) {
		return
	}
	logger.Info("GPU is unhealthy: tainting its devices", "gpu", ev.GPU, "taint", taint.Key+"="+taint.Value+":"+string(taint.Effect), "xid", ev.XID)
	if err := d.republish(ctx); err != nil {
		logger.Error(err, "Republishing the node's devices with the unhealthy GPU's taint failed", "gpu", ev.GPU)
	}
	d.health.notify()
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
	d.metrics.unhealthyGPUs.Set(float64(len(opts.Taints)))
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
				if t.Key == UnhealthyTaintKey {
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
	wait, err := watchNVMLHealth(d.cfg.Backend.NVML, d.inventory, logger)
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
		d.health.watchers.Go(func() { watchInjections(ctx, d.cfg.Backend.NVML, d.cfg.HealthInjectionFile) })
	}
}

// taintsDropped says whether err only reports that the API server dropped device taints
// (feature gate DRADeviceTaints off): the plugin keeps running, pod status still shows
// device health, but the scheduler does not avoid the unhealthy GPUs.
func taintsDropped(err error) bool {
	var dropped *resourceslice.DroppedFieldsError
	return errors.As(err, &dropped) && slices.Equal(dropped.DisabledFeatures(), []string{"DRADeviceTaints"})
}

package kubeletplugin

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/kubeletplugin/health"
	"github.com/gpudra/gpudra/kubeletplugin/internal/loop"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// gpuHealth is the node's GPU health as the plugin uses it (health.GPUs): the taints
// of its unhealthy GPUs, kept in health.File, and whether NVML events are watched.
type gpuHealth interface {
	Record(gpu int, taint resourceapi.DeviceTaint) (tainted, changed bool, err error)
	Reload() (bool, error)
	RenderTaints() map[int][]resourceapi.DeviceTaint
	SetWatching(on bool)
	Notify()
	Watching() (bool, <-chan struct{})
	Cleared() []health.Cleared
}

// healthWatch is the node's GPU health and what watches it.
type healthWatch struct {
	gpuHealth
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

// handleHealthEvent records an event, and when a GPU became (more) unhealthy
// republishes the node's slices with its devices tainted.
func (d *Driver) handleHealthEvent(ctx context.Context, ev health.Event) {
	logger := klog.FromContext(ctx)
	kind, taint := health.Verdict(ev)
	effect := resourceapi.DeviceTaintEffectNone
	if taint != nil {
		effect = taint.Effect
	}
	// Counted once handled, so that a count seen means the slices are republished.
	defer d.metrics.healthEvents.WithLabelValues(kind, string(effect)).Inc()
	if taint == nil {
		logger.V(2).Info("GPU event leaves the GPU healthy", "gpu", ev.GPU, "kind", kind, "xid", ev.XID, "why", health.ApplicationXIDs[ev.XID])
		return
	}
	tainted, changed, err := d.health.Record(ev.GPU, *taint)
	if err != nil {
		logger.Error(err, "Recording the unhealthy GPU in the GPU health file failed: its taint is not kept across restarts until it is written", "gpu", ev.GPU)
	}
	if tainted {
		logger.Info("GPU is unhealthy: tainting its devices", "gpu", ev.GPU, "taint", health.TaintString(*taint), "xid", ev.XID)
		d.health.events.unhealthy(ev.GPU, *taint, ev.XID)
		d.state.repairs.claimsEvent(ev.GPU, corev1.EventTypeWarning, ReasonGPUUnhealthy, "Taint",
			"GPU %d, which this claim uses, is unhealthy: its devices are published with the taint %s", ev.GPU, health.TaintString(*taint))
	}
	if !changed {
		return
	}
	if err := d.republish(ctx); err != nil {
		logger.Error(err, "Republishing the node's devices with the unhealthy GPU's taint failed", "gpu", ev.GPU)
	}
	d.health.Notify()
}

// republish renders the pool with the current taints, without the devices of GPUs a MIG
// layout withdrew, and publishes it.
func (d *Driver) republish(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	opts := d.cfg.Render
	opts.Taints = d.health.RenderTaints()
	pool, err := driver.Render(d.inventory, opts)
	if err != nil {
		return err
	}
	_, withdrawn := d.state.repartitioning.withdrawn()
	pool = withoutGPUs(pool, withdrawn)
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
	watching, changed := d.health.Watching()
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
	if d.cfg.Backend.NVML != nil {
		wait, err := watchNVMLHealth(d.cfg.Backend.NVML, d.inventory, cmp.Or(d.cfg.NVMLEventWait, time.Second), logger, &d.health.loops)
		if err != nil {
			logger.Error(err, "GPU health is not watched: devices are reported with unknown health")
		} else {
			d.health.SetWatching(true)
			d.health.watchers.Go(func() {
				defer d.health.SetWatching(false)
				wait(ctx, func(ev health.Event) { d.handleHealthEvent(ctx, ev) })
			})
		}
	}
	if sys := d.cfg.Backend.KFD; sys != nil {
		if d.cfg.Backend.NVML == nil {
			d.health.SetWatching(true)
		}
		d.health.watchers.Go(func() {
			watchKFDHealth(ctx, sys, d.inventory, kfdHealthInterval, func(ev health.Event) { d.handleHealthEvent(ctx, ev) })
		})
	}
	if d.cfg.HealthInjectionFile != "" && d.cfg.Backend.NVML != nil {
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
	d.health.events.startup(d.inventory.Unreadable, d.health.Cleared())
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
		changed, err := d.health.Reload()
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
		d.health.Notify()
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

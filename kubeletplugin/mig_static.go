package kubeletplugin

import (
	"cmp"
	"context"
	"fmt"
	"reflect"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/discover"
	"github.com/gpudra/gpudra/kubeletplugin/internal/loop"
)

// defaultMIGLayoutInterval is how often, with static MIG, the plugin looks for MIG
// instances created or destroyed outside it (Config.MIGLayoutInterval).
const defaultMIGLayoutInterval = 30 * time.Second

// ReasonMIGInstanceGone: the MIG instance a prepared claim uses no longer exists.
const ReasonMIGInstanceGone = "MIGInstanceGone"

// watchesMIGLayout says whether the node publishes existing MIG instances (static MIG
// on a GPU whose MIG mode is enabled), whose layout can change under the plugin.
func (d *Driver) watchesMIGLayout() bool {
	if d.cfg.Render.MIG != "" && d.cfg.Render.MIG != driver.MIGStatic {
		return false
	}
	for _, g := range d.inventory.GPUs {
		if g.MIG != nil && g.MIG.Enabled {
			return true
		}
	}
	return false
}

// startMIGLayoutWatch re-reads, every Config.MIGLayoutInterval until ctx ends, the
// MIG instances of the GPUs that publish them, and republishes when they changed.
func (d *Driver) startMIGLayoutWatch(ctx context.Context) {
	if !d.watchesMIGLayout() {
		return
	}
	d.health.watchers.Go(func() {
		logger := klog.FromContext(ctx)
		loop.After(ctx, cmp.Or(d.cfg.MIGLayoutInterval, defaultMIGLayoutInterval), func(ctx context.Context) bool {
			if _, err := d.refreshMIGLayout(ctx); err != nil {
				logger.Error(err, "Reading the GPUs' MIG instances failed: the published MIG devices stay as they were")
			}
			return false
		})
	})
}

// refreshMIGLayout reads the MIG instances of the GPUs in MIG mode and, when they are not
// what the node publishes, publishes the ones that exist now. Nothing is created or
// destroyed; a prepared claim whose instance is gone keeps its record (its containers
// fail on their own) and is reported in the log and an Event on the claim.
func (d *Driver) refreshMIGLayout(ctx context.Context) (changed bool, err error) {
	logger := klog.FromContext(ctx)
	s := d.state
	unlock, err := s.lock()
	if err != nil {
		return false, err
	}
	inv := s.planner.inv
	now := map[int][]driver.MIGInstance{}
	for k := range inv.GPUs {
		g := &inv.GPUs[k]
		if g.MIG == nil || !g.MIG.Enabled {
			continue
		}
		list, err := discover.MIGInstances(d.cfg.Backend, g)
		if err != nil {
			unlock()
			return false, err
		}
		if len(list) != len(g.MIG.Instances) || (len(list) > 0 && !reflect.DeepEqual(list, g.MIG.Instances)) {
			now[g.Index] = list
		}
	}
	if len(now) == 0 {
		unlock()
		return false, nil
	}
	views := map[int]migView{}
	for k := range inv.GPUs {
		g := &inv.GPUs[k]
		if list, ok := now[g.Index]; ok {
			logger.Info("MIG instances changed outside the plugin: publishing the ones that exist", "gpu", g.Index,
				"before", instanceNames(g.MIG.Instances), "now", instanceNames(list))
			views[g.Index] = migView{enabled: true, instances: list}
		}
	}
	if err := d.publishMIGViews(ctx, unlock, views); err != nil {
		return true, fmt.Errorf("republishing the node's devices after its MIG instances changed: %w", err)
	}
	return true, nil
}

// migView is a MIG-capable GPU's MIG mode and the MIG instances that exist on it.
type migView struct {
	enabled   bool
	instances []driver.MIGInstance
}

// publishMIGViews makes the GPUs' MIG modes and instances those of views, renders the
// node's devices again and republishes them; a prepared claim whose instance is gone is
// reported (reportGoneMIG). The state is locked; publishMIGViews unlocks it.
func (d *Driver) publishMIGViews(ctx context.Context, unlock func(), views map[int]migView) error {
	s := d.state
	inv := s.planner.inv
	now := map[int][]driver.MIGInstance{}
	d.mu.Lock()
	for k := range inv.GPUs {
		g := &inv.GPUs[k]
		if v, ok := views[g.Index]; ok && g.MIG != nil {
			mig := *g.MIG
			mig.Enabled = v.enabled
			mig.Instances = v.instances
			g.MIG = &mig
			now[g.Index] = v.instances
		}
	}
	d.mu.Unlock()
	pool, err := driver.Render(inv, d.cfg.Render)
	if err == nil {
		devices := map[string]resourceapi.Device{}
		for _, sl := range pool.Slices {
			for _, dev := range sl.Devices {
				devices[dev.Name] = dev
			}
		}
		s.planner.devices = devices
		d.setTypes(deviceTypes(pool))
	}
	s.reportGoneMIG(now)
	unlock()
	if err != nil {
		return err
	}
	if err := d.republish(ctx); err != nil {
		return err
	}
	d.health.Notify()
	return nil
}

// reportGoneMIG logs, and records an Event on the claim, for each prepared claim whose
// MIG instance is not among the instances that now exist on its GPU; s is locked.
func (s *state) reportGoneMIG(now map[int][]driver.MIGInstance) {
	for _, pc := range s.cp.Claims {
		for _, dv := range pc.Devices {
			mi := dv.MIG
			if mi == nil {
				continue
			}
			list, ok := now[mi.Parent]
			if !ok {
				continue
			}
			found := false
			for _, in := range list {
				if in.GIProfileID == mi.GIProfileID && in.Placement.Start == mi.Start && in.Full {
					found = true
				}
			}
			if found {
				continue
			}
			ref := klog.KRef(pc.Namespace, pc.Name)
			s.logger.Error(nil, "The MIG instance of a prepared claim no longer exists: its containers lose the device; the plugin creates none with --mig=static",
				"claim", ref, "claimUID", pc.UID, "device", dv.Device, "gpu", mi.Parent, "profile", mi.Profile, "start", mi.Start)
			s.repairs.mu.Lock()
			s.repairs.event(ref, pc.UID, corev1.EventTypeWarning, ReasonMIGInstanceGone, partMIG,
				"MIG device %s (%s at placement %d on GPU %d of node %s) no longer exists: it was destroyed or the GPU partitioned again while the claim was prepared",
				dv.Device, mi.Profile, mi.Start, mi.Parent, s.planner.nodeName)
			s.repairs.mu.Unlock()
		}
	}
}

func instanceNames(list []driver.MIGInstance) []string {
	out := make([]string, len(list))
	for k, in := range list {
		out[k] = fmt.Sprintf("%s@%d", in.Profile, in.Placement.Start)
	}
	return out
}

// setTypes replaces the published devices' types (metrics labels).
func (d *Driver) setTypes(types map[string]string) {
	d.mu.Lock()
	d.types = types
	d.mu.Unlock()
}

// deviceTypesNow are the published devices' types.
func (d *Driver) deviceTypesNow() map[string]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.types
}

package kubeletplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/kubeletplugin/internal/loop"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// DeviceUsage is what the plugin writes in the data of a prepared claim's
// status.devices entry: what the claim's processes use on the device's GPUs.
type DeviceUsage struct {
	Usage UsageData `json:"usage"`
}

// UsageData is one device's usage, as the API package defines it for every reader.
type UsageData = api.DeviceUsage

// defaultUsageStatusInterval is how often usage is written to the claims' status.
const defaultUsageStatusInterval = 30 * time.Second

// deviceUsages is the usage of each of the claim's devices, in the order of its devices.
func deviceUsages(pc *prepared.Claim, snap *usageSnapshot, gpuMemory map[int]int64, now time.Time) []UsageData {
	on := map[int]claimGPUUsage{}
	for _, u := range snap.claims {
		if u.UID == pc.UID {
			on[u.GPU] = u
		}
	}
	out := make([]UsageData, len(pc.Devices))
	for k, d := range pc.Devices {
		u := UsageData{ObservedAt: metav1.NewTime(now.Truncate(time.Second))}
		smKnown, memKnown := len(d.GPUs) > 0, true
		sm, mem := 0, int64(0)
		for _, idx := range d.GPUs {
			c, ok := on[idx]
			mem += c.MemoryUsed
			memKnown = memKnown && (!ok || c.MemoryKnown)
			u.Processes += c.Processes
			sm += c.SMUtil
			smKnown = smKnown && c.SMKnown
			if len(d.GPUs) > 1 || d.CDI.MemoryBytes == 0 {
				u.MemoryLimitBytes += gpuMemory[idx]
			}
		}
		if len(d.GPUs) <= 1 && d.CDI.MemoryBytes != 0 {
			u.MemoryLimitBytes = d.CDI.MemoryBytes
		}
		if smKnown {
			u.SMUtilizationPercent = &sm
		}
		if memKnown {
			u.MemoryUsedBytes = &mem
		}
		if d.Type == api.TypeShare {
			g, c := d.CDI.ComputePercent, 100
			if l := d.CDI.Limits; l != nil && l.ComputePercent > 0 {
				c = l.ComputePercent
			}
			u.ComputeGuaranteePercent, u.ComputeCapPercent = &g, &c
		}
		if l := d.CDI.Limits; d.Type == api.TypeShare && l != nil && l.HAMi && l.Priority == string(api.PriorityLow) && len(d.GPUs) == 1 {
			held := int64(on[d.GPUs[0]].HeldBack / time.Second)
			u.HeldBackSeconds = &held
		}
		out[k] = u
	}
	return out
}

// usageChanged says whether now differs from was by enough to write it again: another
// process count, limit or compute, memory by 64 MiB and 5% of the limit, or SM
// utilization by 5 points, held-back time by 30 s.
func usageChanged(was, now []UsageData) bool {
	if len(was) != len(now) {
		return true
	}
	intOf := func(p *int) int {
		if p == nil {
			return -1
		}
		return *p
	}
	for k := range now {
		a, b := was[k], now[k]
		if a.Processes != b.Processes || a.MemoryLimitBytes != b.MemoryLimitBytes ||
			intOf(a.ComputeGuaranteePercent) != intOf(b.ComputeGuaranteePercent) || intOf(a.ComputeCapPercent) != intOf(b.ComputeCapPercent) ||
			(a.SMUtilizationPercent == nil) != (b.SMUtilizationPercent == nil) {
			return true
		}
		if (a.MemoryUsedBytes == nil) != (b.MemoryUsedBytes == nil) {
			return true
		}
		if a, b := a.MemoryUsedBytes, b.MemoryUsedBytes; a != nil {
			if diff := max(*a-*b, *b-*a); diff >= 64<<20 && diff*20 >= now[k].MemoryLimitBytes {
				return true
			}
		}
		if d := intOf(a.SMUtilizationPercent) - intOf(b.SMUtilizationPercent); d >= 5 || d <= -5 {
			return true
		}
		if a, b := a.HeldBackSeconds, b.HeldBackSeconds; (a == nil) != (b == nil) || (a != nil && *b-*a >= 30) {
			return true
		}
	}
	return false
}

// usageStatus writes the prepared claims' usage and readiness to their status.devices.
type usageStatus struct {
	d       *Driver
	sampler *usageSampler
	written map[types.UID]deviceStatuses
}

// deviceStatuses are what was last written for a claim's devices, in its devices' order.
type deviceStatuses struct {
	usages []UsageData
	ready  []readiness
}

// startUsageStatus writes the prepared claims' usage to their status every
// Usage.StatusInterval until ctx ends; nothing without an API client or a sampler.
func (d *Driver) startUsageStatus(ctx context.Context) {
	u := usageCollectorIn(d.metrics)
	if u == nil || u.sampler.Load() == nil || d.cfg.BackgroundClient == nil {
		return
	}
	every := d.cfg.Usage.StatusInterval
	if every <= 0 {
		every = defaultUsageStatusInterval
	}
	w := &usageStatus{d: d, sampler: u.sampler.Load(), written: map[types.UID]deviceStatuses{}}
	go loop.After(ctx, every, func(ctx context.Context) bool {
		w.writeAll(ctx)
		return false
	})
}

// writeAll writes the usage and readiness of each prepared claim whose usage changed
// meaningfully, or whose readiness changed, since it was last written.
func (w *usageStatus) writeAll(ctx context.Context) {
	snap := w.sampler.sample(ctx)
	gpus, claims := w.d.state.preparedView()
	mem := map[int]int64{}
	for _, g := range gpus {
		mem[g.Index] = int64(g.MemoryBytes)
	}
	var taints map[int][]resourceapi.DeviceTaint
	if w.d.health != nil {
		taints = w.d.health.RenderTaints()
	}
	seen := map[types.UID]bool{}
	now := time.Now()
	for _, pc := range claims {
		seen[pc.UID] = true
		st := deviceStatuses{usages: deviceUsages(pc, snap, mem, now)}
		for _, pd := range pc.Devices {
			st.ready = append(st.ready, deviceReadiness(pd, taints))
		}
		if was, ok := w.written[pc.UID]; ok && !usageChanged(was.usages, st.usages) && slices.Equal(was.ready, st.ready) {
			continue
		}
		if err := w.d.writeStatus(ctx, pc, st, now); err != nil {
			klog.FromContext(ctx).V(2).Info("Writing a claim's device status failed; trying again later", "claim", klog.KRef(pc.Namespace, pc.Name), "err", err)
			continue
		}
		w.written[pc.UID] = st
	}
	for uid := range w.written {
		if !seen[uid] {
			delete(w.written, uid)
		}
	}
}

// StatusFieldManager is the field manager of the plugin's writes to claims' status.
const StatusFieldManager = "gpudra-kubelet-plugin"

// ConditionReady is the condition of a prepared device's status.devices entry that says
// whether the device is ready for the claim's pods: True once prepared on healthy GPUs.
const ConditionReady = "Ready"

// ReasonPrepared is the reason of a True Ready condition; a False one has
// ReasonGPUUnhealthy.
const ReasonPrepared = "Prepared"

// readiness is a prepared device's Ready condition.
type readiness struct {
	ready           bool
	reason, message string
}

// deviceReadiness is Ready for a prepared device: False while one of its GPUs carries
// the unhealthy taint.
func deviceReadiness(pd prepared.Device, taints map[int][]resourceapi.DeviceTaint) readiness {
	var sick []string
	for _, idx := range pd.GPUs {
		for _, t := range taints[idx] {
			if t.Key == api.TaintUnhealthy {
				sick = append(sick, fmt.Sprintf("GPU %d (%s)", idx, t.Value))
			}
		}
	}
	if len(sick) > 0 {
		return readiness{reason: ReasonGPUUnhealthy, message: "unhealthy: " + strings.Join(sick, ", ")}
	}
	return readiness{ready: true, reason: ReasonPrepared, message: "prepared on this node"}
}

// writeStatus writes the claim's status.devices entries of its prepared devices (their
// usage in data, and the Ready condition) as the plugin's field manager, keeping the
// entries of other drivers as they are.
//
// It updates rather than applies: Kubernetes 1.37.2 refused the plugin's server-side
// apply of status.devices as a change of status.allocation ("requires
// resourceclaims/binding"), so the plugin writes back the whole status it read.
func (d *Driver) writeStatus(ctx context.Context, pc *prepared.Claim, st deviceStatuses, now time.Time) error {
	claims := d.cfg.BackgroundClient.ResourceV1().ResourceClaims(pc.Namespace)
	c, err := claims.Get(ctx, pc.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if c.UID != pc.UID || c.Status.Allocation == nil {
		return nil // another claim of that name, or no longer allocated
	}
	allocated := map[string]bool{}
	for _, r := range c.Status.Allocation.Devices.Results {
		var share *string
		if r.ShareID != nil {
			s := string(*r.ShareID)
			share = &s
		}
		allocated[deviceStatusKey(r.Driver, r.Pool, r.Device, share)] = true
	}
	readySince := map[string]metav1.Condition{}
	var devices []resourceapi.AllocatedDeviceStatus
	for _, s := range c.Status.Devices {
		if r := meta.FindStatusCondition(s.Conditions, ConditionReady); r != nil {
			readySince[deviceStatusKey(s.Driver, s.Pool, s.Device, s.ShareID)] = *r
		}
		if s.Driver != api.DriverName {
			devices = append(devices, s)
		}
	}
	for k, pd := range pc.Devices {
		var share *string
		if pd.ShareID != "" {
			share = &pd.ShareID
		}
		key := deviceStatusKey(api.DriverName, pd.Pool, pd.Device, share)
		if !allocated[key] {
			continue
		}
		raw, err := json.Marshal(DeviceUsage{Usage: st.usages[k]})
		if err != nil {
			return err
		}
		r := st.ready[k]
		cond := metav1.ConditionFalse
		if r.ready {
			cond = metav1.ConditionTrue
		}
		since := metav1.NewTime(now.Truncate(time.Second))
		if was, ok := readySince[key]; ok && was.Status == cond {
			since = was.LastTransitionTime
		}
		devices = append(devices, resourceapi.AllocatedDeviceStatus{
			Driver: api.DriverName, Pool: pd.Pool, Device: pd.Device, ShareID: share,
			Data: &runtime.RawExtension{Raw: raw},
			Conditions: []metav1.Condition{{Type: ConditionReady, Status: cond, Reason: r.reason, Message: r.message,
				ObservedGeneration: c.Generation, LastTransitionTime: since}},
		})
	}
	c.Status.Devices = devices
	_, err = claims.UpdateStatus(ctx, c, metav1.UpdateOptions{FieldManager: StatusFieldManager})
	return err
}

func deviceStatusKey(driverName, pool, device string, share *string) string {
	s := ""
	if share != nil {
		s = *share
	}
	return driverName + "/" + pool + "/" + device + "/" + s
}

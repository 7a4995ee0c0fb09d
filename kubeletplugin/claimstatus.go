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
	"github.com/gpudra/gpudra/kubeletplugin/usage"
)

// DeviceUsage is what the plugin writes in the data of a prepared claim's
// status.devices entry: what the claim's processes use on the device's GPUs.
type DeviceUsage struct {
	Usage UsageData `json:"usage"`
}

// UsageData is one device's usage, as the API package defines it for every reader.
type UsageData = api.DeviceUsage

// defaultStatusInterval is how often the claims' device status is written.
const defaultStatusInterval = 30 * time.Second

// claimStatus writes the prepared claims' device status: each device's Ready condition,
// and its usage when usage is sampled.
type claimStatus struct {
	d *Driver
	// usage samples what the claims use; nil writes no usage.
	usage   *usage.Sampler
	written map[types.UID]deviceStatuses
}

// deviceStatuses are what was last written for a claim's devices, in its devices' order.
type deviceStatuses struct {
	usages []UsageData // nil without usage sampling
	ready  []readiness
}

func newClaimStatus(d *Driver) *claimStatus {
	return &claimStatus{d: d, usage: d.usage, written: map[types.UID]deviceStatuses{}}
}

// startClaimStatus writes the prepared claims' device status every StatusInterval until
// ctx ends, whether usage is sampled or not; nothing without an API client.
func (d *Driver) startClaimStatus(ctx context.Context) {
	if d.cfg.BackgroundClient == nil {
		return
	}
	every := d.cfg.StatusInterval
	if every <= 0 {
		every = defaultStatusInterval
	}
	w := newClaimStatus(d)
	go loop.After(ctx, every, func(ctx context.Context) bool {
		w.writeAll(ctx)
		return false
	})
}

// writeAll writes the readiness and usage of each prepared claim whose readiness changed,
// or whose usage changed meaningfully, since it was last written.
func (w *claimStatus) writeAll(ctx context.Context) {
	var snap *usage.Snapshot
	if w.usage != nil {
		snap = w.usage.Snapshot(ctx)
	}
	_, claims := w.d.state.Prepared()
	var taints map[int][]resourceapi.DeviceTaint
	if w.d.health != nil {
		taints = w.d.health.RenderTaints()
	}
	seen := map[types.UID]bool{}
	now := time.Now()
	for _, pc := range claims {
		seen[pc.UID] = true
		var st deviceStatuses
		if snap != nil {
			st.usages = snap.Devices(pc, now)
		}
		for _, pd := range pc.Devices {
			st.ready = append(st.ready, deviceReadiness(pd, taints))
		}
		if was, ok := w.written[pc.UID]; ok && !usage.Changed(was.usages, st.usages) && slices.Equal(was.ready, st.ready) {
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
// usage in data, where sampled, and the Ready condition) as the plugin's field manager, keeping the
// entries of other drivers as they are.
//
// It updates rather than applies. A server-side apply carries the live claim through
// unstructured data and back (structuredMergeManager.Apply, k8s.io/apimachinery
// managedfields), so every embedded JSON object in its status comes back compact with its
// keys sorted: the opaque parameters the allocation copied from the claim or its class, and
// other drivers' data. The API server compares the old and new status exactly
// (resourceclaimStatusStrategy.ValidateUpdate, k8s.io/kubernetes
// pkg/registry/resource/resourceclaim/strategy.go): a respelled allocation needs
// resourceclaims/binding (AuthorizedForBinding) and is refused as immutable anyway; a
// respelled entry of another driver needs that driver's resourceclaims/driver
// (AuthorizedForDeviceStatus). So whether an apply succeeds depends on how the claim's
// author spelled its parameters; an update writes back the bytes it read.
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
		var data *runtime.RawExtension
		if st.usages != nil {
			raw, err := json.Marshal(DeviceUsage{Usage: st.usages[k]})
			if err != nil {
				return err
			}
			data = &runtime.RawExtension{Raw: raw}
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
			Data: data,
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

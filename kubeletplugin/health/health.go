// Package health keeps the node's GPU health: what an NVML event means for a GPU
// (Verdict), and the taints of the unhealthy GPUs (GPUs), held in File in the
// plugin's checkpoint directory so that every plugin instance on the node publishes
// the same taints and a restarted plugin keeps them.
package health

import (
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

// EventTypes are the NVML events the plugin watches. Single-bit ECC errors are
// corrected by the hardware and left out.
const EventTypes uint64 = nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeGpuUnavailableError

// Event is one NVML event about a GPU.
type Event struct {
	GPU int
	// Type is the nvml.EventType* bit; 0 with Lost.
	Type uint64
	// XID is the XID code of an XID critical error.
	XID uint64
	// Lost is NVML's "GPU is lost" (nvml.ERROR_GPU_IS_LOST from an event wait).
	Lost bool
	At   time.Time
}

// Verdict decides what an event means: its kind (a metrics label) and the taint the
// GPU's devices get, nil when the GPU stays healthy.
func Verdict(ev Event) (kind string, taint *resourceapi.DeviceTaint) {
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

// GPUs is the node's GPU health: the taint of each unhealthy GPU as File holds
// it, the one source for every plugin instance on the node, so that a restarted plugin
// and both plugins of a rolling update publish the same taints. A GPU stays unhealthy
// until NVML shows it healthy again at a plugin's start (healthyAgain).
type GPUs struct {
	mu     sync.Mutex
	store  *healthStore
	bootID string
	// uuids are the discovered GPUs' UUIDs by index, recorded with their taints.
	uuids map[int]string
	// recs holds one record per unhealthy GPU, by index: the first taint, or the first
	// that evicts. unsaved are records File could not take yet (written at the
	// next change or poll); they are in recs too.
	recs, unsaved map[int]Unhealthy
	// cleared are the records that the start-up found healthy again, with why.
	cleared []Cleared
	// watching is true while NVML events are watched; devices are Unknown otherwise.
	watching bool
	// changed is closed and replaced whenever what the plugin reports changes.
	changed chan struct{}
}

// worsen records r in recs unless its GPU already has a taint as bad (NoExecute, or
// r's is not); it reports whether recs changed.
func worsen(recs map[int]Unhealthy, r Unhealthy) bool {
	old, unhealthy := recs[r.Index]
	if unhealthy && (old.Taint.Effect == string(resourceapi.DeviceTaintEffectNoExecute) || r.Taint.Effect != string(resourceapi.DeviceTaintEffectNoExecute)) {
		return false
	}
	recs[r.Index] = r
	return true
}

// Record applies a taint to GPU gpu, in File and here. tainted reports whether
// the GPU's taint became this one; changed whether the taints to publish changed (this
// GPU's, or others' that another plugin instance wrote meanwhile). A taint File
// cannot take is kept here, and the error returned.
func (h *GPUs) Record(gpu int, taint resourceapi.DeviceTaint) (tainted, changed bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	rec := Unhealthy{Index: gpu, UUID: h.uuids[gpu], BootID: h.bootID, Taint: fileTaint(taint)}
	recs, err := h.store.update(func(recs map[int]Unhealthy) bool {
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

// Reload takes what another plugin instance wrote to File, and writes the
// records it could not take before. It reports whether the taints to publish changed.
func (h *GPUs) Reload() (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.unsaved) == 0 && !h.store.changed() {
		return false, nil
	}
	recs, err := h.store.update(func(recs map[int]Unhealthy) bool {
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
func (h *GPUs) take(recs map[int]Unhealthy) bool {
	same := maps.EqualFunc(h.recs, recs, func(a, b Unhealthy) bool {
		return a.Index == b.Index && a.Taint.Key == b.Taint.Key && a.Taint.Value == b.Taint.Value &&
			a.Taint.Effect == b.Taint.Effect && a.Taint.Added.Equal(b.Taint.Added)
	})
	h.recs = recs
	return !same
}

// RenderTaints are the taints in the form driver.Render takes.
func (h *GPUs) RenderTaints() map[int][]resourceapi.DeviceTaint {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[int][]resourceapi.DeviceTaint, len(h.recs))
	for gpu, r := range h.recs {
		out[gpu] = []resourceapi.DeviceTaint{r.Taint.Device()}
	}
	return out
}

// SetWatching says whether NVML events are watched (devices are Unknown otherwise).
func (h *GPUs) SetWatching(on bool) {
	h.mu.Lock()
	h.watching = on
	h.mu.Unlock()
	h.Notify()
}

// Notify wakes what waits on Watching's channel.
func (h *GPUs) Notify() {
	h.mu.Lock()
	defer h.mu.Unlock()
	close(h.changed)
	h.changed = make(chan struct{})
}

// Watching reports whether NVML events are watched, and a channel closed when what the
// kubelet is told of the devices' health changes.
func (h *GPUs) Watching() (bool, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.watching, h.changed
}

// Cleared are the records that the start found healthy again, with why.
func (h *GPUs) Cleared() []Cleared { return h.cleared }

// TaintString is a taint as kubectl writes it, key=value:effect.
func TaintString(t resourceapi.DeviceTaint) string {
	return t.Key + "=" + t.Value + ":" + string(t.Effect)
}

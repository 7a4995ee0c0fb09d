package usage

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// heldBackKey is one claim on one GPU.
type heldBackKey struct {
	uid types.UID
	gpu int
}

// heldBack sums, per claim and GPU, how long a Low-priority share enforced by HAMi-core had
// processes on its GPU while a High-priority HAMi-core share there was busy (SM utilization
// above 0): the time HAMi-core's priority holds its tasks back. It is counted between two
// consecutive samples that both saw it, so it is a lower bound at the sampling's resolution
// (scrapes and status writes, at most every usageCacheAge). MPS has no such hold across
// claims (each has its own MPS server), so MPS shares are not counted.
type heldBack struct {
	at    time.Time
	was   map[heldBackKey]bool
	total map[heldBackKey]time.Duration
}

// account adds the time since the previous sample to the claims held back in both, forgets
// claims that are no longer prepared, and writes each claim's total into snap.
func (h *heldBack) account(snap *Snapshot, now time.Time) {
	busyHigh := map[int]bool{}
	for _, c := range snap.claims {
		if c.HAMi && c.Priority == string(api.PriorityHigh) && c.SMKnown && c.SMUtil > 0 {
			busyHigh[c.GPU] = true
		}
	}
	is := map[heldBackKey]bool{}
	total := map[heldBackKey]time.Duration{}
	for k := range snap.claims {
		c := &snap.claims[k]
		key := heldBackKey{c.UID, c.GPU}
		held := c.HAMi && c.Priority == string(api.PriorityLow) && c.Processes > 0 && busyHigh[c.GPU]
		t := h.total[key]
		if held && h.was[key] && now.After(h.at) {
			t += now.Sub(h.at)
		}
		is[key], total[key], c.HeldBack = held, t, t
	}
	h.at, h.was, h.total = now, is, total
}

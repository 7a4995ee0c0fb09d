package usage

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// Devices is the usage of each of the claim's devices in the snapshot, in the order of
// its devices, observed at now.
func (snap *Snapshot) Devices(pc *prepared.Claim, now time.Time) []api.DeviceUsage {
	gpuMemory := snap.memory
	on := map[int]claimGPUUsage{}
	for _, u := range snap.claims {
		if u.UID == pc.UID {
			on[u.GPU] = u
		}
	}
	out := make([]api.DeviceUsage, len(pc.Devices))
	for k, d := range pc.Devices {
		u := api.DeviceUsage{ObservedAt: metav1.NewTime(now.Truncate(time.Second))}
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

// Changed says whether now differs from was by enough to write it again: another
// process count, limit or compute, memory by 64 MiB and 5% of the limit, or SM
// utilization by 5 points, held-back time by 30 s.
func Changed(was, now []api.DeviceUsage) bool {
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

package kubeletplugin

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// usageWriters are the status writers of the drivers tests write usage with.
var usageWriters sync.Map // *Driver → *usageStatus

// WriteUsageStatus writes the prepared claims' usage to their status.devices once, as
// the plugin does every Usage.StatusInterval, where it changed meaningfully since d
// last wrote it.
func WriteUsageStatus(ctx context.Context, d *Driver) {
	w, _ := usageWriters.LoadOrStore(d, &usageStatus{d: d, sampler: usageCollectorIn(d.metrics).sampler.Load(), written: map[types.UID]deviceStatuses{}})
	w.(*usageStatus).writeAll(ctx)
}

// ExpireUsageSample makes d's next scrape or status write sample the GPUs again.
func ExpireUsageSample(d *Driver) {
	s := usageCollectorIn(d.metrics).sampler.Load()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = nil
}

// SetUsageClock makes d's usage samples read the time from now.
func SetUsageClock(d *Driver, now func() time.Time) {
	s := usageCollectorIn(d.metrics).sampler.Load()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = now
}

package kubeletplugin

import "time"

// SetUsageClock makes d's usage samples read the time from now.
func SetUsageClock(d *Driver, now func() time.Time) {
	s := usageCollectorIn(d.metrics).sampler.Load()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = now
}

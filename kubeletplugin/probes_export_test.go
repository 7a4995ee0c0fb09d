package kubeletplugin

import "time"

// LoopsStuckAfter makes d's liveness count a background loop as stuck once a round
// takes longer than after.
func LoopsStuckAfter(d *Driver, after time.Duration) {
	d.health.loops.mu.Lock()
	defer d.health.loops.mu.Unlock()
	d.health.loops.stuckAfter = after
}

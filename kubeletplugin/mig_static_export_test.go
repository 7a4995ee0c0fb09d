package kubeletplugin

import "context"

// WatchMIGLayout starts the static-MIG layout watch of a plugin made with New, as Start
// does, until ctx ends.
func WatchMIGLayout(ctx context.Context, d *Driver) { d.startMIGLayoutWatch(ctx) }

// RefreshMIGLayout runs one round of the static-MIG layout watch.
func RefreshMIGLayout(ctx context.Context, d *Driver) (bool, error) { return d.refreshMIGLayout(ctx) }

package kubeletplugin

import (
	"context"
	"sync"
)

// statusWriters are the status writers of the drivers tests write status with.
var statusWriters sync.Map // *Driver → *claimStatus

// WriteClaimStatus writes the prepared claims' device status once, as the plugin does
// every StatusInterval, where it changed since d last wrote it.
func WriteClaimStatus(ctx context.Context, d *Driver) {
	w, _ := statusWriters.LoadOrStore(d, newClaimStatus(d))
	w.(*claimStatus).writeAll(ctx)
}

// ExpireUsageSample makes d's next scrape or status write sample the GPUs again.
func ExpireUsageSample(d *Driver) { d.usage.Expire() }

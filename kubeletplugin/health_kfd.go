package kubeletplugin

import (
	"context"
	"io/fs"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/kfd"
	"github.com/gpudra/gpudra/kubeletplugin/health"
)

// kfdHealthInterval is how often the AMD and Hygon GPUs' KFD nodes are read again.
const kfdHealthInterval = 10 * time.Second

// watchKFDHealth reads each AMD and Hygon GPU's KFD node every interval until ctx ends. A
// GPU whose node is gone, unreadable or another GPU now (kfd.Check) is reported once as
// lost, which taints its devices as a lost NVIDIA GPU's are; KFD has no event to wait on.
func watchKFDHealth(ctx context.Context, sys fs.FS, inv *driver.Inventory, interval time.Duration, handle func(health.Event)) {
	logger := klog.FromContext(ctx)
	lost := map[int]bool{}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		for k := range inv.GPUs {
			g := &inv.GPUs[k]
			if g.KFD == nil || lost[g.Index] {
				continue
			}
			if err := kfd.Check(sys, g); err != nil {
				lost[g.Index] = true
				logger.Error(err, "AMD GPU is lost", "gpu", g.Index, "uuid", g.UUID)
				handle(health.Event{GPU: g.Index, Lost: true, At: time.Now()})
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

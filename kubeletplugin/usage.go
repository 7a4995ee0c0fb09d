package kubeletplugin

import (
	"cmp"
	"context"
	"slices"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/nvmlsim"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
	"github.com/gpudra/gpudra/kubeletplugin/usage"
)

// The usage sampler reads the prepared claims from the state.
var _ usage.Node = (*state)(nil)

// Prepared is the inventory's GPUs and the completed claims, copied under the state's
// lock and sorted by namespace and name.
func (s *state) Prepared() ([]driver.GPU, []*prepared.Claim) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var gpus []driver.GPU
	if s.planner != nil && s.planner.inv != nil {
		gpus = slices.Clone(s.planner.inv.GPUs)
	}
	var claims []*prepared.Claim
	if s.cp != nil {
		for _, pc := range s.cp.Claims {
			if pc.State != prepared.PrepareCompleted {
				continue
			}
			c := *pc
			c.Devices = slices.Clone(pc.Devices)
			claims = append(claims, &c)
		}
	}
	slices.SortFunc(claims, func(a, b *prepared.Claim) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return gpus, claims
}

// newUsageSampler builds the sampler of cfg's backend; nil when usage is disabled.
func newUsageSampler(ctx context.Context, cfg Config, st *state) *usage.Sampler {
	if cfg.Usage.Disabled || cfg.Backend == nil || cfg.Backend.NVML == nil {
		return nil
	}
	logger := klog.FromContext(ctx).WithName("usage")
	if cfg.Backend.Simulated {
		path := cfg.Usage.ProcessesFile
		if path == "" && cfg.PluginDataDir != "" {
			path = cfg.PluginDataDir + "/processes"
		}
		if path != "" {
			if err := nvmlsim.SetProcessesFile(cfg.Backend.NVML, path); err != nil {
				logger.V(2).Info("Simulated processes are not read from a file", "err", err)
			}
		}
	}
	return usage.New(cfg.Usage, cfg.Backend.NVML, cfg.BackgroundClient, st, logger)
}

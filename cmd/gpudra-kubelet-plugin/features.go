package main

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/component-base/featuregate"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/internal/features"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
	"github.com/gpudra/gpudra/kubeletplugin/usage"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// addFeatureGates binds --feature-gates to f's gates, made here when f has none.
func (f *flags) addFeatureGates(fs *pflag.FlagSet) {
	if f.gates == nil {
		f.gates = features.New()
	}
	features.AddFlag(fs, f.gates)
}

// enabled says whether the gate is on: as --feature-gates set it, else its default.
func (f flags) enabled(name featuregate.Feature) bool { return f.gateSet().Enabled(name) }

// gateSet is f's gates, or the defaults where the flags were not bound to a command.
func (f flags) gateSet() featuregate.FeatureGate {
	if f.gates == nil {
		return features.New()
	}
	return f.gates
}

// checkFeatureGates refuses a flag that asks for a behaviour whose gate is off, naming the
// flag, the gate and its stage. Behaviours without a flag of their own follow their gate
// alone (ClaimUsage: usageConfig; TimeSlicing: gatedTimeSlicer).
func (f flags) checkFeatureGates() error {
	gates := f.gateSet()
	for _, c := range []struct {
		asked bool
		gate  featuregate.Feature
		what  string
	}{
		{f.mig == string(driver.MIGDynamic), features.DynamicMIG, "--mig=dynamic"},
		{f.migLayouts != "", features.MIGLayouts, "--mig-layouts"},
		{f.memoryOversubscription > 1, features.MemoryOversubscription, fmt.Sprintf("--memory-oversubscription=%v", f.memoryOversubscription)},
		{f.vgpuLibrary != "", features.HAMiCoreEnforcement, "--vgpu-library"},
		{f.sharePriorityThreshold != nil, features.SharePriorityFromPods, "--" + sharePriorityFlag},
		{f.mpsDaemons == mpsInPod, features.MPSDaemonPods, "--mps-control-daemons=" + mpsInPod},
	} {
		if c.asked {
			if err := features.Require(gates, c.gate, c.what); err != nil {
				return err
			}
		}
	}
	return nil
}

// usageConfig is the per-claim usage sampling's configuration: off unless ClaimUsage is on.
func (f flags) usageConfig() usage.Config {
	return usage.Config{PodResourcesSocket: f.podResourcesSocket, Disabled: !f.enabled(features.ClaimUsage)}
}

// gatedTimeSlicer is ts, or where TimeSlicing is off, a TimeSlicer that refuses every
// interval but Default: a claim asking for one fails its prepare, naming the gate, and a
// GPU still gets its default back when a claim prepared before is released.
func (f flags) gatedTimeSlicer(ts plugin.TimeSlicer) plugin.TimeSlicer {
	if f.enabled(features.TimeSlicing) {
		return ts
	}
	return defaultTimeSliceOnly{TimeSlicer: ts, gates: f.gateSet()}
}

type defaultTimeSliceOnly struct {
	plugin.TimeSlicer
	gates featuregate.FeatureGate
}

func (d defaultTimeSliceOnly) SetTimeSlice(ctx context.Context, gpu string, iv api.TimeSliceInterval) error {
	if iv != api.IntervalDefault {
		return features.Require(d.gates, features.TimeSlicing, "sharing.timeSlicing.interval="+string(iv))
	}
	return d.TimeSlicer.SetTimeSlice(ctx, gpu, iv)
}

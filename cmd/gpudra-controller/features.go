package main

import (
	"github.com/spf13/pflag"
	"k8s.io/component-base/featuregate"

	"github.com/gpudra/gpudra/internal/features"
)

// addFeatureGates binds --feature-gates to o's gates, made here when o has none.
func (o *options) addFeatureGates(fs *pflag.FlagSet) {
	if o.gates == nil {
		o.gates = features.New()
	}
	features.AddFlag(fs, o.gates)
}

// enabled says whether the gate is on: as --feature-gates set it, else its default.
func (o options) enabled(name featuregate.Feature) bool { return o.gateSet().Enabled(name) }

// gateSet is o's gates, or the defaults where the options were not bound to flags.
func (o options) gateSet() featuregate.FeatureGate {
	if o.gates == nil {
		return features.New()
	}
	return o.gates
}

// checkFeatureGates refuses a flag that asks for a behaviour whose gate is off, naming the
// flag, the gate and its stage. The admission check has no flag of its own: its gate
// alone runs it (run), --admission-check-workers giving its workers.
func (o options) checkFeatureGates() error {
	if o.dashboardAddr != "" {
		if err := features.Require(o.gateSet(), features.WebView, "--dashboard-bind-address"); err != nil {
			return err
		}
	}
	if o.largeJobsFirstBands != "" {
		if err := features.Require(o.gateSet(), features.LargeJobsFirst, "--large-jobs-first-bands"); err != nil {
			return err
		}
	}
	if o.hamiPods {
		return features.Require(o.gateSet(), features.HAMiPods, "--hami-pods")
	}
	return nil
}

package features

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/component-base/featuregate"
)

// Release is the gpudra release the gates are evaluated at (major.minor). A spec whose
// Version is later than Release is not yet available.
const Release = "0.1"

// FlagName is the flag every gpudra binary sets its gates with.
const FlagName = "feature-gates"

const (
	// DynamicMIG: --mig=dynamic publishes whole GPUs and every MIG placement and creates
	// a MIG instance at each prepare (gpudra-kubelet-plugin).
	DynamicMIG featuregate.Feature = "DynamicMIG"
	// MIGLayouts: --mig-layouts, named MIG layouts a node label chooses, applied by the
	// plugin with --mig=static (gpudra-kubelet-plugin).
	MIGLayouts featuregate.Feature = "MIGLayouts"
	// MemoryOversubscription: --memory-oversubscription above 1, share devices offering
	// more memory than the card has (gpudra-kubelet-plugin).
	MemoryOversubscription featuregate.Feature = "MemoryOversubscription"
	// HAMiCoreEnforcement: --vgpu-library, shares enforced by preloading HAMi-core's
	// libvgpu.so into their containers (gpudra-kubelet-plugin).
	HAMiCoreEnforcement featuregate.Feature = "HAMiCoreEnforcement"
	// SharePriorityFromPods: --share-priority-threshold, a share's unset priority taken
	// from its pods' PriorityClass (gpudra-kubelet-plugin).
	SharePriorityFromPods featuregate.Feature = "SharePriorityFromPods"
	// MPSDaemonPods: --mps-control-daemons=pod, each MPS claim's control daemon in a pod
	// of its own (gpudra-kubelet-plugin).
	MPSDaemonPods featuregate.Feature = "MPSDaemonPods"
	// TimeSlicing: claims whose config sets sharing.timeSlicing.interval other than
	// Default get that GPU time-slice at prepare (gpudra-kubelet-plugin).
	TimeSlicing featuregate.Feature = "TimeSlicing"
	// ClaimUsage: the per-claim usage sampling, gpudra_plugin_claim_* metrics and the
	// usage in claims' status.devices (gpudra-kubelet-plugin).
	ClaimUsage featuregate.Feature = "ClaimUsage"
	// TopologyAdmissionCheck: the Kueue admission check gpudra.dev/topology and the pod
	// pinning that carries out its placements (gpudra-controller).
	TopologyAdmissionCheck featuregate.Feature = "TopologyAdmissionCheck"
	// JobDependencies: Jobs that run after others (annotation gpudra.dev/run-after),
	// held at a Kueue admission gate until those succeed: the mutating webhook and its
	// controller (gpudra-controller).
	JobDependencies featuregate.Feature = "JobDependencies"
	// LargeJobsFirst: --large-jobs-first-bands, queued Jobs without a priority of their
	// own given the WorkloadPriorityClass of their GPU demand's band by a mutating
	// webhook, and lifted to the top band once they waited --large-jobs-first-max-wait
	// (gpudra-controller).
	LargeJobsFirst featuregate.Feature = "LargeJobsFirst"
	// WebView: --dashboard-bind-address, the read-only web view (gpudra-controller).
	WebView featuregate.Feature = "WebView"
	// Defragmentation: moves opted-in pods (gpudra.dev/movable) through the Eviction API, and
	// admitted Kueue Workloads through the topology check's Retry, to make room for a
	// Workload whose gang does not fit (gpudra-controller).
	Defragmentation featuregate.Feature = "Defragmentation"
	// DataPrewarm: the datasets of queued Kueue Workloads warmed while they wait, by a
	// Fluid DataLoad per Workload and dataset where Fluid serves them, else an Event naming
	// the nodes their pods may run on (gpudra-controller).
	DataPrewarm featuregate.Feature = "DataPrewarm"
	// HAMiPods: the mutating webhook that rewrites pods written for HAMi into pods with
	// gpudra claims as they are created (gpudra-controller, with --webhook-port).
	HAMiPods featuregate.Feature = "HAMiPods"
)

// specs are the gates' stages, oldest first. A promotion appends a spec with the release
// that made it; a spec is never edited once released.
var specs = map[featuregate.Feature]featuregate.VersionedSpecs{
	DynamicMIG:             {alpha("0.1")},
	MIGLayouts:             {beta("0.1")},
	MemoryOversubscription: {alpha("0.1")},
	HAMiCoreEnforcement:    {alpha("0.1")},
	SharePriorityFromPods:  {alpha("0.1")},
	MPSDaemonPods:          {beta("0.1")},
	TimeSlicing:            {beta("0.1")},
	ClaimUsage:             {beta("0.1")},
	TopologyAdmissionCheck: {beta("0.1")},
	WebView:                {alpha("0.1")},
	HAMiPods:               {alpha("0.1")},
	JobDependencies:        {alpha("0.1")},
	LargeJobsFirst:         {alpha("0.1")},
	Defragmentation:        {alpha("0.1")},
	DataPrewarm:            {alpha("0.1")},
}

func alpha(since string) featuregate.FeatureSpec {
	return featuregate.FeatureSpec{Version: version.MustParse(since), Default: false, PreRelease: featuregate.Alpha}
}

func beta(since string) featuregate.FeatureSpec {
	return featuregate.FeatureSpec{Version: version.MustParse(since), Default: true, PreRelease: featuregate.Beta}
}

// Known are the names of gpudra's gates, sorted.
func Known() []string {
	var names []string
	for name := range specs {
		names = append(names, string(name))
	}
	slices.Sort(names)
	return names
}

// Specs are a copy of the gates' versioned specs.
func Specs() map[featuregate.Feature]featuregate.VersionedSpecs {
	out := make(map[featuregate.Feature]featuregate.VersionedSpecs, len(specs))
	for name, s := range specs {
		out[name] = slices.Clone(s)
	}
	return out
}

// New is a gate with every gpudra gate registered at Release, each at its default.
func New() featuregate.MutableVersionedFeatureGate {
	gate := featuregate.NewVersionedFeatureGate(version.MustParse(Release))
	if err := Register(gate); err != nil {
		panic(err) // the specs above are wrong: TestEveryGateHasAStage says which
	}
	return gate
}

// Register adds gpudra's gates to gate.
func Register(gate featuregate.MutableVersionedFeatureGate) error {
	return gate.AddVersioned(Specs())
}

// AddFlag binds --feature-gates to gate on fs. Its help lists the known gates, and a name
// it does not know is refused with the names it does.
func AddFlag(fs *pflag.FlagSet, gate featuregate.MutableVersionedFeatureGate) {
	gate.Close()
	fs.Var(flag{gate}, FlagName, "comma-separated gate=true|false pairs that turn gpudra's alpha (off by default) and beta (on by default) behaviours on or off (docs/feature-gates.md). Options are:\n"+strings.Join(gate.KnownFeatures(), "\n"))
}

// flag is --feature-gates: the gate's own parsing, with the known names in its errors.
type flag struct {
	featuregate.MutableVersionedFeatureGate
}

func (f flag) Set(value string) error {
	if err := f.MutableVersionedFeatureGate.Set(value); err != nil {
		if strings.Contains(err.Error(), "unrecognized feature gate") {
			return fmt.Errorf("%w; known gates: %s", err, strings.Join(Known(), ", "))
		}
		return err
	}
	return nil
}

func (f flag) Type() string { return "mapStringBool" }

func (f flag) String() string {
	if s, ok := f.MutableVersionedFeatureGate.(fmt.Stringer); ok {
		return s.String()
	}
	return ""
}

// Require is nil when gate has name on, else an error saying that what (a flag and its
// value as given, e.g. "--mig=dynamic") needs it, with the gate's stage.
func Require(gate featuregate.FeatureGate, name featuregate.Feature, what string) error {
	if gate.Enabled(name) {
		return nil
	}
	return fmt.Errorf("%s requires --%s=%s=true (%s)", what, FlagName, name, Stage(name))
}

// Stage is the gate's maturity at Release, with its default where it is on by default:
// "alpha", or "beta, on by default".
func Stage(name featuregate.Feature) string {
	s := specs[name]
	if len(s) == 0 {
		return "unknown"
	}
	at := version.MustParse(Release)
	spec := s[0]
	for _, v := range s {
		if !v.Version.GreaterThan(at) {
			spec = v
		}
	}
	stage := strings.ToLower(string(spec.PreRelease))
	if spec.Default {
		stage += ", on by default"
	}
	return stage
}

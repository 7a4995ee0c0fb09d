package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The API group, version and kinds of gpudra's opaque device configuration.
const (
	Group      = "gpu.gpudra.dev"
	Version    = "v1alpha1"
	APIVersion = Group + "/" + Version

	GpuConfigKind = "GpuConfig"
	MigConfigKind = "MigConfig"
)

// Kinds lists the accepted kinds.
var Kinds = []string{GpuConfigKind, MigConfigKind}

// Config is a decoded configuration object: a *GpuConfig or a *MigConfig.
type Config interface {
	runtime.Object
	// Kind is the object's kind.
	Kind() string
	// Normalize fills in defaults.
	Normalize()
	// Validate checks a normalized object; errors carry field paths and accepted values.
	Validate() error
}

// GpuConfig configures whole GPUs, NVLink groups and GPU shares.
//
//	apiVersion: gpu.gpudra.dev/v1alpha1
//	kind: GpuConfig
//	sharing:
//	  strategy: MPS
//	  mps:
//	    defaultActiveThreadPercentage: 50
//	    defaultPinnedDeviceMemoryLimit: 10Gi
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type GpuConfig struct {
	metav1.TypeMeta `json:",inline"`
	// Sharing says how the processes of the pods sharing the claim share each GPU.
	Sharing *Sharing `json:"sharing,omitempty"`
	// Limits says how a share's consumed capacity (memory, compute) is enforced.
	Limits *ShareLimits `json:"limits,omitempty"`
}

// MigConfig configures MIG devices.
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type MigConfig struct {
	metav1.TypeMeta `json:",inline"`
	// Sharing says how the processes of the pods sharing the claim share each MIG device.
	Sharing *Sharing `json:"sharing,omitempty"`
}

// SharingStrategy is how processes share one device.
type SharingStrategy string

// Sharing strategies.
const (
	// TimeSlicing lets CUDA contexts take turns on the whole device (the default).
	TimeSlicing SharingStrategy = "TimeSlicing"
	// MPS runs the processes under one MPS control daemon per claim, with limits.
	MPS SharingStrategy = "MPS"
)

// SharingStrategies lists the accepted strategies.
var SharingStrategies = []SharingStrategy{TimeSlicing, MPS}

// Sharing selects a strategy and its settings; only the chosen strategy's block may be set.
type Sharing struct {
	Strategy    SharingStrategy    `json:"strategy,omitempty"`
	TimeSlicing *TimeSlicingConfig `json:"timeSlicing,omitempty"`
	MPS         *MPSConfig         `json:"mps,omitempty"`
}

// TimeSliceInterval is the length of a time slice, as nvidia-smi compute-policy names it.
type TimeSliceInterval string

// Time-slice intervals.
const (
	IntervalDefault TimeSliceInterval = "Default"
	IntervalShort   TimeSliceInterval = "Short"
	IntervalMedium  TimeSliceInterval = "Medium"
	IntervalLong    TimeSliceInterval = "Long"
)

// Intervals lists the accepted time-slice intervals.
var Intervals = []TimeSliceInterval{IntervalDefault, IntervalShort, IntervalMedium, IntervalLong}

// TimeSlicingConfig configures time-slicing.
type TimeSlicingConfig struct {
	Interval TimeSliceInterval `json:"interval,omitempty"`
}

// MPSConfig configures the claim's MPS control daemon.
type MPSConfig struct {
	// DefaultActiveThreadPercentage caps each client's share of the SMs, 1..100.
	DefaultActiveThreadPercentage *int `json:"defaultActiveThreadPercentage,omitempty"`
	// DefaultPinnedDeviceMemoryLimit caps each client's device memory.
	DefaultPinnedDeviceMemoryLimit *resource.Quantity `json:"defaultPinnedDeviceMemoryLimit,omitempty"`
}

// Enforcement is how a GPU share's capacity becomes limits inside the container.
type Enforcement string

// Enforcement modes.
const (
	// EnforceAuto uses HAMi-core when the node has libvgpu.so configured, else MPS limits.
	EnforceAuto Enforcement = "Auto"
	// EnforceHAMi requires HAMi-core (libvgpu.so preloaded); prepare fails without it.
	EnforceHAMi Enforcement = "HAMi"
	// EnforceMPS turns the share into MPS active-thread and pinned-memory limits.
	EnforceMPS Enforcement = "MPS"
)

// Enforcements lists the accepted enforcement modes.
var Enforcements = []Enforcement{EnforceAuto, EnforceHAMi, EnforceMPS}

// SharePolicy is a share's service tier: what its compute request reserves and what caps it.
type SharePolicy string

// Share policies.
const (
	// PolicyFixed (the default) reserves the share's compute request and caps it there.
	PolicyFixed SharePolicy = "Fixed"
	// PolicyGuaranteed reserves the compute request as a floor and caps the share at
	// computeLimit (default 100), so it bursts into compute the others leave idle.
	PolicyGuaranteed SharePolicy = "Guaranteed"
	// PolicyBestEffort reserves no compute, may be capped at computeLimit, and runs at low
	// priority: it yields to the other shares of the GPU.
	PolicyBestEffort SharePolicy = "BestEffort"
)

// SharePolicies lists the accepted share policies.
var SharePolicies = []SharePolicy{PolicyFixed, PolicyGuaranteed, PolicyBestEffort}

// SharePriority ranks the shares of one GPU: while a High share runs, Low shares are held back.
type SharePriority string

// Share priorities.
const (
	PriorityHigh SharePriority = "High"
	PriorityLow  SharePriority = "Low"
)

// SharePriorities lists the accepted share priorities.
var SharePriorities = []SharePriority{PriorityHigh, PriorityLow}

// ShareLimits configures a share's service tier and how its consumed capacity (memory,
// compute) is enforced.
//
//	limits:
//	  enforcement: HAMi
//	  policy: Guaranteed   # the claim's compute request (say 30) is the floor
//	  computeLimit: 100    # the cap: it bursts into idle compute
//	  priority: High
type ShareLimits struct {
	Enforcement Enforcement `json:"enforcement,omitempty"`
	// Policy is the share's tier; "" means Fixed.
	Policy SharePolicy `json:"policy,omitempty"`
	// ComputeLimit caps a Guaranteed or BestEffort share's compute, in percent of the GPU's
	// SMs (1..100; a Guaranteed share's at least its request). Fixed shares are capped at
	// their request and take none.
	ComputeLimit *int `json:"computeLimit,omitempty"`
	// Priority is High or Low; BestEffort shares are Low. Unset, a share has its pods'
	// priority on nodes whose plugin runs with --share-priority-threshold (High when the
	// highest PriorityClass value of the claim's pods is at least the threshold, else
	// Low), and the mechanism's normal priority elsewhere.
	Priority SharePriority `json:"priority,omitempty"`
}

// Kind implements Config.
func (*GpuConfig) Kind() string { return GpuConfigKind }

// Kind implements Config.
func (*MigConfig) Kind() string { return MigConfigKind }

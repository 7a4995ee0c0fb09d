package v1alpha1

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MinPinnedDeviceMemory and MaxPinnedDeviceMemory bound sharing.mps.defaultPinnedDeviceMemoryLimit:
// MPS takes the limit in whole MiB, so less than 1Mi would be no limit at all, and a
// quantity past MaxPinnedDeviceMemory (1Pi, far beyond any GPU's memory) is a mistake, one
// past int64 bytes not even a number of bytes.
var (
	MinPinnedDeviceMemory = resource.MustParse("1Mi")
	MaxPinnedDeviceMemory = resource.MustParse("1Pi")
)

// Normalize fills in defaults: time-slicing with the default interval, Auto enforcement.
func (c *GpuConfig) Normalize() {
	if c.Sharing == nil {
		c.Sharing = &Sharing{}
	}
	c.Sharing.normalize()
	if c.Limits == nil {
		c.Limits = &ShareLimits{}
	}
	if c.Limits.Enforcement == "" {
		c.Limits.Enforcement = EnforceAuto
	}
	if c.Limits.Policy == "" {
		c.Limits.Policy = PolicyFixed
	}
	if c.Limits.Policy == PolicyBestEffort && c.Limits.Priority == "" {
		c.Limits.Priority = PriorityLow
	}
}

// Normalize fills in defaults: time-slicing with the default interval.
func (c *MigConfig) Normalize() {
	if c.Sharing == nil {
		c.Sharing = &Sharing{}
	}
	c.Sharing.normalize()
}

func (s *Sharing) normalize() {
	if s.Strategy == "" {
		s.Strategy = TimeSlicing
	}
	switch s.Strategy {
	case TimeSlicing:
		if s.TimeSlicing == nil {
			s.TimeSlicing = &TimeSlicingConfig{}
		}
		if s.TimeSlicing.Interval == "" {
			s.TimeSlicing.Interval = IntervalDefault
		}
	case MPS:
		if s.MPS == nil {
			s.MPS = &MPSConfig{}
		}
	}
}

// Validate checks a normalized GpuConfig.
func (c *GpuConfig) Validate() error { return c.validate(nil).ToAggregate() }

// Validate checks a normalized MigConfig.
func (c *MigConfig) Validate() error { return c.validate(nil).ToAggregate() }

func (c *GpuConfig) validate(path *field.Path) field.ErrorList {
	errs := c.Sharing.validate(path.Child("sharing"))
	return append(errs, c.Limits.validate(path.Child("limits"))...)
}

func (l *ShareLimits) validate(path *field.Path) field.ErrorList {
	if l == nil {
		return nil
	}
	var errs field.ErrorList
	if !slices.Contains(Enforcements, l.Enforcement) {
		errs = append(errs, field.NotSupported(path.Child("enforcement"), l.Enforcement, Enforcements))
	}
	if !slices.Contains(SharePolicies, l.Policy) {
		return append(errs, field.NotSupported(path.Child("policy"), l.Policy, SharePolicies))
	}
	if c := l.ComputeLimit; c != nil {
		switch {
		case l.Policy == PolicyFixed:
			errs = append(errs, field.Forbidden(path.Child("computeLimit"),
				fmt.Sprintf("a %s share is capped at its compute request; computeLimit is for policy %s or %s", PolicyFixed, PolicyGuaranteed, PolicyBestEffort)))
		case *c < 1 || *c > 100:
			errs = append(errs, field.Invalid(path.Child("computeLimit"), *c, "must be between 1 and 100 (percent of the GPU's SMs)"))
		}
	}
	if l.Priority != "" && !slices.Contains(SharePriorities, l.Priority) {
		errs = append(errs, field.NotSupported(path.Child("priority"), l.Priority, SharePriorities))
	}
	if l.Policy == PolicyBestEffort && l.Priority == PriorityHigh {
		errs = append(errs, field.Invalid(path.Child("priority"), l.Priority, fmt.Sprintf("a %s share always yields to the others: leave priority unset or %s", PolicyBestEffort, PriorityLow)))
	}
	return errs
}

// ComputeCap is the compute cap, in percent, of a share whose compute request is request
// (0: no cap): the request for Fixed, computeLimit for Guaranteed (100 when unset, which is
// no cap) and BestEffort.
func (l *ShareLimits) ComputeCap(request int) int {
	switch {
	case l == nil || l.Policy == "" || l.Policy == PolicyFixed:
		return request
	case l.ComputeLimit == nil || *l.ComputeLimit >= 100:
		return 0
	default:
		return *l.ComputeLimit
	}
}

// MaxComputePercent is the most compute a share may request: all of its GPU's SMs.
const MaxComputePercent = 100

// ComputePercent is a share's compute capacity request in whole percent of the GPU's SMs (a
// fraction rounds up, as the allocator's step does). A request below 0 or above
// MaxComputePercent is an error at path: no quantity, however large, wraps into a small one.
func ComputePercent(path *field.Path, q resource.Quantity) (int, *field.Error) {
	if q.Sign() < 0 || q.Cmp(*resource.NewQuantity(MaxComputePercent, resource.DecimalSI)) > 0 {
		return 0, field.Invalid(path, q.String(), fmt.Sprintf("must be from 0 to %d (percent of the GPU's SMs)", MaxComputePercent))
	}
	return int(q.Value()), nil
}

// ValidateFor checks a share's tier against its compute request (percent of the GPU): a
// Guaranteed share's floor is its request, so it needs one, at most its computeLimit; a
// BestEffort share reserves nothing, so it has none.
func (l *ShareLimits) ValidateFor(path *field.Path, computeRequest int) field.ErrorList {
	if l == nil {
		return nil
	}
	switch l.Policy {
	case PolicyGuaranteed:
		if computeRequest <= 0 {
			return field.ErrorList{field.Invalid(path.Child("policy"), l.Policy,
				"a Guaranteed share's floor is its compute request: request capacity compute between 1 and 100 on the share")}
		}
		if c := l.ComputeLimit; c != nil && *c < computeRequest {
			return field.ErrorList{field.Invalid(path.Child("computeLimit"), *c,
				fmt.Sprintf("is below the share's compute request (%d, its floor): the cap must be from the floor to 100", computeRequest))}
		}
	case PolicyBestEffort:
		if computeRequest > 0 {
			return field.ErrorList{field.Invalid(path.Child("policy"), l.Policy,
				fmt.Sprintf("a BestEffort share reserves no compute, but it requests %d: request no compute and cap it with computeLimit", computeRequest))}
		}
	}
	return nil
}

func (c *MigConfig) validate(path *field.Path) field.ErrorList {
	return c.Sharing.validate(path.Child("sharing"))
}

func (s *Sharing) validate(path *field.Path) field.ErrorList {
	if s == nil {
		return field.ErrorList{field.Required(path, "call Normalize before Validate")}
	}
	var errs field.ErrorList
	if !slices.Contains(SharingStrategies, s.Strategy) {
		return append(errs, field.NotSupported(path.Child("strategy"), s.Strategy, SharingStrategies))
	}
	if s.Strategy != TimeSlicing && s.TimeSlicing != nil {
		errs = append(errs, field.Forbidden(path.Child("timeSlicing"), fmt.Sprintf("may only be set when strategy is %s", TimeSlicing)))
	}
	if s.Strategy != MPS && s.MPS != nil {
		errs = append(errs, field.Forbidden(path.Child("mps"), fmt.Sprintf("may only be set when strategy is %s", MPS)))
	}
	if ts := s.TimeSlicing; ts != nil && !slices.Contains(Intervals, ts.Interval) {
		errs = append(errs, field.NotSupported(path.Child("timeSlicing", "interval"), ts.Interval, Intervals))
	}
	if m := s.MPS; m != nil {
		if p := m.DefaultActiveThreadPercentage; p != nil && (*p < 1 || *p > 100) {
			errs = append(errs, field.Invalid(path.Child("mps", "defaultActiveThreadPercentage"), *p, "must be between 1 and 100 (percent of the device's SMs)"))
		}
		if q := m.DefaultPinnedDeviceMemoryLimit; q != nil && (q.Cmp(MinPinnedDeviceMemory) < 0 || q.Cmp(MaxPinnedDeviceMemory) > 0) {
			errs = append(errs, field.Invalid(path.Child("mps", "defaultPinnedDeviceMemoryLimit"), q.String(),
				fmt.Sprintf("must be a positive quantity of memory from %s to %s, e.g. 10Gi (MPS takes the limit in whole MiB)", MinPinnedDeviceMemory.String(), MaxPinnedDeviceMemory.String())))
		}
	}
	return errs
}

// Device is what a config is checked against at prepare: the memory the device has
// (a whole GPU's, a MIG device's, or a share's consumed memory).
type Device struct {
	MemoryBytes int64
}

// ValidateFor checks limits that depend on the device: an MPS pinned memory limit
// must fit in its memory.
func (s *Sharing) ValidateFor(path *field.Path, d Device) field.ErrorList {
	if s == nil || s.MPS == nil || s.MPS.DefaultPinnedDeviceMemoryLimit == nil || d.MemoryBytes <= 0 {
		return nil
	}
	q := s.MPS.DefaultPinnedDeviceMemoryLimit
	if q.Value() > d.MemoryBytes {
		return field.ErrorList{field.Invalid(path.Child("mps", "defaultPinnedDeviceMemoryLimit"), q.String(),
			fmt.Sprintf("exceeds the device's memory (%s)", resource.NewQuantity(d.MemoryBytes, resource.BinarySI)))}
	}
	return nil
}

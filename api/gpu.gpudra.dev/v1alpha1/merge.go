package v1alpha1

import (
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Resolved is the effective configuration of one allocated device: defaults, then the
// DeviceClass's configs, then the claim's, each later one overriding the earlier.
// Both are normalized and validated.
type Resolved struct {
	GPU *GpuConfig
	MIG *MigConfig
}

// ValidateOpaque decodes, normalizes and validates one opaque parameters object,
// reporting errors below path (e.g. spec.devices.config[0].opaque.parameters). It is
// what an admission webhook checks for every config of the driver.
func ValidateOpaque(raw []byte, path *field.Path) error {
	obj, err := decodeAt(raw, path)
	if err != nil {
		return err
	}
	obj.Normalize()
	return validateAt(obj, path).ToAggregate()
}

func validateAt(obj Config, path *field.Path) field.ErrorList {
	switch c := obj.(type) {
	case *GpuConfig:
		return c.validate(path)
	case *MigConfig:
		return c.validate(path)
	}
	return nil
}

// Resolve merges the configs that apply to request (a claim request name, or
// "request/subrequest") from an allocation's config list. Only opaque configs for
// driverName count. Class configs come before claim configs; within each, list order;
// a later config replaces the earlier's top-level blocks (sharing, limits) that it sets.
// A config applies when its requests list is empty or names the request or its parent.
// Every applicable config is decoded strictly and validated on its own; errors carry
// the path status.allocation.devices.config[i].opaque.parameters.<field>.
func Resolve(configs []resourceapi.DeviceAllocationConfiguration, driverName, request string) (Resolved, error) {
	path := field.NewPath("status", "allocation", "devices", "config")
	type indexed struct {
		i int
		c resourceapi.DeviceAllocationConfiguration
	}
	var ordered []indexed
	for i, c := range configs {
		if c.Opaque != nil && c.Opaque.Driver == driverName && appliesTo(c.Requests, request) {
			ordered = append(ordered, indexed{i, c})
		}
	}
	slices.SortStableFunc(ordered, func(a, b indexed) int { return rank(a.c.Source) - rank(b.c.Source) })

	gpu, mig := &GpuConfig{}, &MigConfig{}
	var errs field.ErrorList
	for _, ic := range ordered {
		p := path.Index(ic.i).Child("opaque", "parameters")
		obj, err := decodeAt(ic.c.Opaque.Parameters.Raw, p)
		if err != nil {
			return Resolved{}, err
		}
		check := obj.DeepCopyObject().(Config)
		check.Normalize()
		if e := validateAt(check, p); len(e) > 0 {
			errs = append(errs, e...)
			continue
		}
		switch c := obj.(type) {
		case *GpuConfig:
			if c.Sharing != nil {
				gpu.Sharing = c.Sharing
			}
			if c.Limits != nil {
				gpu.Limits = c.Limits
			}
		case *MigConfig:
			if c.Sharing != nil {
				mig.Sharing = c.Sharing
			}
		}
	}
	if len(errs) > 0 {
		return Resolved{}, errs.ToAggregate()
	}
	gpu.Normalize()
	mig.Normalize()
	if err := gpu.Validate(); err != nil { // combinations of valid configs are valid; kept as a guard
		return Resolved{}, fmt.Errorf("merged GpuConfig: %w", err)
	}
	if err := mig.Validate(); err != nil {
		return Resolved{}, fmt.Errorf("merged MigConfig: %w", err)
	}
	return Resolved{GPU: gpu, MIG: mig}, nil
}

func rank(s resourceapi.AllocationConfigSource) int {
	if s == resourceapi.AllocationConfigSourceClass {
		return 0
	}
	return 1
}

// appliesTo reports whether a config's requests list covers request ("req" or "req/sub").
func appliesTo(requests []string, request string) bool {
	if len(requests) == 0 {
		return true
	}
	parent, _, _ := strings.Cut(request, "/")
	return slices.Contains(requests, request) || slices.Contains(requests, parent)
}

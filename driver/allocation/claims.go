package allocation

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"
)

// ParseClaimSpec reads a ResourceClaim spec written as a user writes it (YAML, unknown
// fields rejected) and applies the API server's defaults.
func ParseClaimSpec(data []byte) (resourceapi.ResourceClaimSpec, error) {
	var spec resourceapi.ResourceClaimSpec
	if err := yaml.UnmarshalStrict(data, &spec); err != nil {
		return spec, fmt.Errorf("claim spec: %w", err)
	}
	Default(&spec)
	return spec, nil
}

// Default applies the defaults the API server sets on a claim spec (allocation mode
// ExactCount, count 1), which do not run when claims are built in-process.
func Default(spec *resourceapi.ResourceClaimSpec) {
	for k := range spec.Devices.Requests {
		r := &spec.Devices.Requests[k]
		if r.Exactly != nil {
			defaultExact(r.Exactly)
		}
		for j := range r.FirstAvailable {
			sub := &r.FirstAvailable[j]
			if sub.AllocationMode == "" {
				sub.AllocationMode = resourceapi.DeviceAllocationModeExactCount
			}
			if sub.AllocationMode == resourceapi.DeviceAllocationModeExactCount && sub.Count == 0 {
				sub.Count = 1
			}
		}
	}
}

func defaultExact(ex *resourceapi.ExactDeviceRequest) {
	if ex.AllocationMode == "" {
		ex.AllocationMode = resourceapi.DeviceAllocationModeExactCount
	}
	if ex.AllocationMode == resourceapi.DeviceAllocationModeExactCount && ex.Count == 0 {
		ex.Count = 1
	}
}

package deployments

import (
	"fmt"
	"slices"

	"sigs.k8s.io/yaml"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// How a Kueue installation charges whole GPUs.
const (
	// KueueWholeGPUQuotaPercent is the shipped configuration: every gpudra device is charged
	// its compute capacity in api.QuotaGPUPercent, a whole GPU 100.
	KueueWholeGPUQuotaPercent = "percent"
	// KueueWholeGPUQuotaCount charges the whole-GPU classes (gpu.gpudra.dev and
	// any-gpu.gpudra.dev) and the vendors' whole-GPU extended resources one api.QuotaGPU a
	// GPU. Kueue then reads no ResourceSlice to charge them; every other class stays in
	// api.QuotaGPUPercent, so a ClusterQueue needs quota in both.
	KueueWholeGPUQuotaCount = "count"
)

// KueueWholeGPUQuotas are the accepted ways of charging whole GPUs.
var KueueWholeGPUQuotas = []string{KueueWholeGPUQuotaPercent, KueueWholeGPUQuotaCount}

// wholeGPUClasses are the DeviceClasses that allocate whole GPUs only, and
// wholeGPUResources the device plugins' names of a whole GPU.
var (
	wholeGPUClasses   = []string{api.DeviceClassGPU, api.DeviceClassAnyGPU}
	wholeGPUResources = []string{api.ExtendedResourceNVIDIAGPU, api.ExtendedResourceAMDGPU, api.ExtendedResourceHygonDCU}
)

// KueueConfigurationFor is KueueConfiguration as a map, with whole GPUs charged as quota
// says (KueueWholeGPUQuotas). With KueueWholeGPUQuotaCount the whole-GPU classes leave the
// shipped api.QuotaGPUPercent mapping for a mapping of their own without sources, and the
// transformations of nvidia.com/gpu, amd.com/gpu and hygon.com/dcu output one api.QuotaGPU.
func KueueConfigurationFor(quota string) (map[string]any, error) {
	cfg := map[string]any{}
	if err := yaml.Unmarshal(KueueConfiguration, &cfg); err != nil {
		return nil, fmt.Errorf("kueue/config/kueue-config.yaml: %w", err)
	}
	switch quota {
	case "", KueueWholeGPUQuotaPercent:
		return cfg, nil
	case KueueWholeGPUQuotaCount:
	default:
		return nil, fmt.Errorf("whole-GPU quota %q: accepted values: %v", quota, KueueWholeGPUQuotas)
	}
	res, _ := cfg["resources"].(map[string]any)
	if res == nil {
		return nil, fmt.Errorf("kueue/config/kueue-config.yaml has no resources to charge whole GPUs by count in")
	}
	mappings, _ := res["deviceClassMappings"].([]any)
	moved := 0
	for _, m := range mappings {
		mm, _ := m.(map[string]any)
		if mm == nil {
			continue
		}
		names, _ := mm["deviceClassNames"].([]any)
		kept := slices.DeleteFunc(slices.Clone(names), func(n any) bool {
			s, _ := n.(string)
			return slices.Contains(wholeGPUClasses, s)
		})
		moved += len(names) - len(kept)
		mm["deviceClassNames"] = kept
	}
	if moved != len(wholeGPUClasses) {
		return nil, fmt.Errorf("kueue/config/kueue-config.yaml: resources.deviceClassMappings name %d of the whole-GPU classes %v, want each once", moved, wholeGPUClasses)
	}
	classes := make([]any, len(wholeGPUClasses))
	for i, c := range wholeGPUClasses {
		classes[i] = c
	}
	res["deviceClassMappings"] = append(mappings, map[string]any{"name": api.QuotaGPU, "deviceClassNames": classes})
	transformed := 0
	transformations, _ := res["transformations"].([]any)
	for _, t := range transformations {
		tm, _ := t.(map[string]any)
		if in, _ := tm["input"].(string); slices.Contains(wholeGPUResources, in) {
			tm["outputs"] = map[string]any{api.QuotaGPU: "1"}
			transformed++
		}
	}
	if transformed != len(wholeGPUResources) {
		return nil, fmt.Errorf("kueue/config/kueue-config.yaml: resources.transformations hold %d of %v, want each once", transformed, wholeGPUResources)
	}
	return cfg, nil
}

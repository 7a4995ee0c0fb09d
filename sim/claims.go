package sim

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/topology/placement"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// Claim is the ResourceClaim a user writes for a trace pod: k whole GPUs from
// gpu.gpudra.dev, or one share from gpu-share.gpudra.dev with compute = gpu_milli/10
// percent and the same share of the smallest acceptable GPU's memory (at least the
// share minimum), so memory never binds before compute on any GPU the pod accepts;
// gpu_spec becomes a CEL selector on productName. pin, when set, adds a selector on the GPU indices
// (reproduction mode: the paper's GPU choice, checked by the allocator). It returns
// nil for a CPU-only pod.
func Claim(p *placement.Pod, pin []int, uid int64) (*resourceapi.ResourceClaim, error) {
	if p.GPUs == 0 {
		return nil, nil
	}
	req := resourceapi.ExactDeviceRequest{
		DeviceClassName: api.DeviceClassGPU,
		AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
		Count:           int64(p.GPUs),
	}
	minMemory := int64(0)
	for _, m := range placement.Models {
		if len(p.Models) == 0 || slices.Contains(p.Models, m.Code) {
			if minMemory == 0 || m.MemoryMiB < minMemory {
				minMemory = m.MemoryMiB
			}
		}
	}
	if len(p.Models) > 0 {
		names := make([]string, 0, len(p.Models))
		for _, code := range p.Models {
			m, err := placement.ModelByCode(code)
			if err != nil {
				return nil, fmt.Errorf("pod %s: gpu_spec: %w", p.Name, err)
			}
			names = append(names, strconv.Quote(m.ProductName))
		}
		req.Selectors = append(req.Selectors, cel(fmt.Sprintf(`device.attributes[%q].productName in [%s]`, api.DriverName, strings.Join(names, ", "))))
	}
	if p.Fractional() {
		req.DeviceClassName = api.DeviceClassShare
		req.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
			api.CapCompute: *resource.NewQuantity(p.GPUMilli/10, resource.DecimalSI),
			api.CapMemory:  resource.MustParse(strconv.FormatInt(max(minMemory*p.GPUMilli/placement.MilliPerGPU, driver.ShareMemoryMin.Value()>>20), 10) + "Mi"),
		}}
	}
	if len(pin) > 0 {
		idx := make([]string, len(pin))
		for k, i := range pin {
			idx[k] = strconv.Itoa(i)
		}
		req.Selectors = append(req.Selectors, cel(fmt.Sprintf(`device.attributes[%q].index in [%s]`, api.DriverName, strings.Join(idx, ", "))))
	}
	c := &resourceapi.ResourceClaim{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &req}},
	}}}
	c.Name = p.Name
	c.Namespace = "default"
	c.UID = types.UID("uid-" + strconv.FormatInt(uid, 10))
	return c, nil
}

func cel(expr string) resourceapi.DeviceSelector {
	return resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}
}

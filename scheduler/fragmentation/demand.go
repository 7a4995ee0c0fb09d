package fragmentation

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/topology/placement"
)

// gpudra's DeviceClasses (deployments/deviceclasses) the plugin models; a pod asking for
// a MIG device or an NVLink group is left to the other plugins (Skip).
const (
	classGPU   = "gpu.gpudra.dev"
	classShare = "gpu-share.gpudra.dev"
	classMIG   = "mig.gpudra.dev"
	classGroup = "nvlink-group.gpudra.dev"
)

// demandOf is the pod as the placement policies see it: its CPU and memory requests and
// the GPUs its not yet allocated claims ask for. ok is false when the pod asks for gpudra
// devices the policies do not model (MIG, NVLink groups, several shares, prioritized
// lists), or for a claim that does not exist yet.
func demandOf(pod *corev1.Pod, claims fwk.ResourceClaimTracker) (p placement.Pod, ok bool, err error) {
	req := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	p = placement.Pod{Name: pod.Namespace + "/" + pod.Name, CPU: req.Cpu().MilliValue(), Memory: req.Memory().Value() >> 20}
	shares := 0
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil {
			return p, false, err
		}
		if name == nil { // a template that generates no claim for this pod
			continue
		}
		claim, err := claims.Get(pod.Namespace, *name)
		if err != nil {
			return p, false, fmt.Errorf("claim %s/%s of pod %s: %w", pod.Namespace, *name, pod.Name, err)
		}
		if claim.Status.Allocation != nil {
			// Already allocated (shared with another pod): it asks for nothing new.
			continue
		}
		for _, r := range claim.Spec.Devices.Requests {
			if r.Exactly == nil {
				return p, false, nil
			}
			switch r.Exactly.DeviceClassName {
			case classGPU:
				if r.Exactly.AllocationMode != resourceapi.DeviceAllocationModeExactCount && r.Exactly.AllocationMode != "" {
					return p, false, nil
				}
				count := r.Exactly.Count
				if count == 0 {
					count = 1
				}
				p.GPUs += int(count)
			case classShare:
				shares++
				p.GPUMilli = shareMilli(r.Exactly)
			case classMIG, classGroup:
				return p, false, nil
			}
		}
	}
	switch {
	case shares == 0 && p.GPUs > 0:
		p.GPUMilli = placement.MilliPerGPU
	case shares == 1 && p.GPUs == 0:
		p.GPUs = 1
	case shares > 0:
		return p, false, nil // a share beside whole GPUs, or several shares: not one shape
	}
	return p, true, nil
}

// shareMilli is the part of one GPU a share request reserves: its compute percent.
func shareMilli(r *resourceapi.ExactDeviceRequest) int64 {
	if r.Capacity == nil {
		return 0
	}
	q, ok := r.Capacity.Requests[driver.CapCompute]
	if !ok {
		return 0
	}
	return q.Value() * placement.MilliPerGPU / 100
}

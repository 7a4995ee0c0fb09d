package fragmentation

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	fwk "k8s.io/kube-scheduler/framework"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"

	"github.com/gpudra/gpudra/topology/placement"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// gpudra's DeviceClasses (deployments/deviceclasses) the policies model: whole GPUs of
// every vendor and shares. A pod asking for any other gpudra class — MIG devices, NVLink
// or XGMI groups of any size — is left to the other plugins (Skip); classes of other
// drivers ask nothing of the GPUs.
const (
	// classSuffix ends the name of every DeviceClass gpudra ships.
	classSuffix = ".gpudra.dev"
)

// demand is what a pod asks of the nodes, read once per scheduling cycle: its CPU and
// memory requests, the devices its not yet allocated claims ask for, and its DRA-backed
// extended resources, which become devices on the nodes that do not offer them through a
// device plugin.
type demand struct {
	pod      placement.Pod // name, CPU and memory
	claimed  devices
	extended []extendedRequest
}

// extendedRequest is one DRA-backed extended resource of a pod and the devices
// kube-scheduler's claim asks for in its place.
type extendedRequest struct {
	resource corev1.ResourceName
	devices  resourceapi.ExactDeviceRequest
}

// readDemand reads the pod's demand: its claims from the tracker (a claim that does not
// exist yet is an error), its extended resources through classes, the DeviceClass
// resolver the DynamicResources plugin uses.
func readDemand(pod *corev1.Pod, claims fwk.ResourceClaimTracker, classes fwk.DeviceClassResolver) (*demand, error) {
	req := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	d := &demand{
		pod:      placement.Pod{Name: pod.Namespace + "/" + pod.Name, CPU: req.Cpu().MilliValue(), Memory: req.Memory().Value() >> 20},
		extended: extendedRequests(req, classes),
	}
	for i := range pod.Spec.ResourceClaims {
		if d.claimed.unmodelled {
			break
		}
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil {
			return nil, err
		}
		if name == nil { // a template that generates no claim for this pod
			continue
		}
		claim, err := claims.Get(pod.Namespace, *name)
		if err != nil {
			return nil, fmt.Errorf("claim %s/%s of pod %s: %w", pod.Namespace, *name, pod.Name, err)
		}
		if claim.Status.Allocation != nil {
			// Already allocated (shared with another pod): it asks for nothing new.
			continue
		}
		for _, r := range claim.Spec.Devices.Requests {
			if r.Exactly == nil { // a prioritized list: which subrequest is chosen is the allocator's
				d.claimed.unmodelled = true
				break
			}
			d.claimed.add(r.Exactly)
		}
	}
	return d, nil
}

// extendedRequests are the pod's requests for extended resources that a DeviceClass
// backs (DRAExtendedResource), resolved as the DynamicResources plugin resolves them: by
// the framework's DeviceClassResolver, so a class answers to its spec.extendedResourceName
// (of two classes naming one resource, the newer, then the lower name) and to its implicit
// name deviceclass.resource.kubernetes.io/<class>. kube-scheduler's claim asks for that
// many devices of the class: it splits them into one request per container, but what
// it asks in all is the pod's effective request, as here.
func extendedRequests(requests corev1.ResourceList, classes fwk.DeviceClassResolver) []extendedRequest {
	if classes == nil {
		return nil
	}
	var out []extendedRequest
	for name, q := range requests {
		if q.IsZero() || !schedutil.IsDRAExtendedResourceName(name) {
			continue
		}
		class := classes.GetDeviceClass(name)
		if class == nil {
			continue // a plain extended resource (a device plugin's)
		}
		out = append(out, extendedRequest{resource: name, devices: resourceapi.ExactDeviceRequest{
			DeviceClassName: class.Name,
			AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
			Count:           q.Value(),
		}})
	}
	return out
}

// offeredBy reports whether a node offers one of the pod's DRA-backed extended resources
// itself, in its allocatable (a device plugin's): there the pod's demand differs.
func (d *demand) offeredBy(allocatable map[corev1.ResourceName]int64) bool {
	for i := range d.extended {
		if allocatable[d.extended[i].resource] > 0 {
			return true
		}
	}
	return false
}

// on is the pod as the placement policies see it on a node with these allocatable
// extended resources (nil: none): an extended resource the node offers itself is a
// plain resource there, as for kube-scheduler, the others add the devices of
// kube-scheduler's claim. ok is false when the pod asks for gpudra devices the policies
// do not model (MIG, NVLink and XGMI groups, several shares, a share beside whole GPUs,
// prioritized lists); p then has its CPU and memory only.
func (d *demand) on(allocatable map[corev1.ResourceName]int64) (p placement.Pod, ok bool) {
	devs := d.devicesOn(allocatable)
	return devs.of(d.pod)
}

// vendorsOn are the GPU vendors the pod's devices may take on a node with these
// allocatable extended resources, nil for any.
func (d *demand) vendorsOn(allocatable map[corev1.ResourceName]int64) []string {
	return d.devicesOn(allocatable).gpuVendors()
}

func (d *demand) devicesOn(allocatable map[corev1.ResourceName]int64) devices {
	devs := d.claimed
	devs.vendors = slices.Clone(devs.vendors)
	for i := range d.extended {
		if allocatable[d.extended[i].resource] == 0 {
			devs.add(&d.extended[i].devices)
		}
	}
	return devs
}

// devices counts the gpudra devices a pod's requests ask for.
type devices struct {
	gpus, shares int64
	// shareMilli is the part of a GPU the (last) share reserves.
	shareMilli int64
	// vendors are the GPU vendors the requests' classes take; anyVendor is set by a class
	// that takes every vendor's GPUs.
	vendors   []string
	anyVendor bool
	// unmodelled is set by a request the policies do not model.
	unmodelled bool
	// adminAccess is set by a request for admin access, which the allocator may give
	// devices that are allocated already.
	adminAccess bool
}

// classVendor is the vendor whose GPUs a whole-GPU or share class takes ("" for
// any-gpu.gpudra.dev); ok is false for the classes the policies do not model.
func classVendor(class string) (vendor string, ok bool) {
	switch class {
	case api.DeviceClassGPU, api.DeviceClassShare: // shares are NVIDIA's only
		return api.VendorNVIDIA, true
	case api.DeviceClassAMDGPU:
		return api.VendorAMD, true
	case api.DeviceClassHygonGPU:
		return api.VendorHygon, true
	case api.DeviceClassAnyGPU:
		return "", true
	}
	return "", false
}

func (d *devices) add(r *resourceapi.ExactDeviceRequest) {
	d.adminAccess = d.adminAccess || r.AdminAccess != nil && *r.AdminAccess
	vendor, ok := classVendor(r.DeviceClassName)
	if !ok {
		d.unmodelled = d.unmodelled || strings.HasSuffix(r.DeviceClassName, classSuffix)
		return
	}
	if r.AllocationMode != resourceapi.DeviceAllocationModeExactCount && r.AllocationMode != "" {
		d.unmodelled = true
		return
	}
	if vendor == "" {
		d.anyVendor = true
	} else if !slices.Contains(d.vendors, vendor) {
		d.vendors = append(d.vendors, vendor)
	}
	count := max(r.Count, 1) // the API's default is one
	if r.DeviceClassName != api.DeviceClassShare {
		d.gpus += count
		return
	}
	d.shares += count
	d.shareMilli = shareMilli(r)
}

// gpuVendors are the vendors whose GPUs the devices may take, nil for any.
func (d devices) gpuVendors() []string {
	if d.anyVendor {
		return nil
	}
	return d.vendors
}

// of is the pod p asking for these devices, if they make one shape the policies model.
func (d devices) of(p placement.Pod) (placement.Pod, bool) {
	switch {
	case d.unmodelled:
		return p, false
	case d.shares == 0 && d.gpus > 0:
		p.GPUs, p.GPUMilli = int(d.gpus), placement.MilliPerGPU
	case d.shares == 1 && d.gpus == 0:
		p.GPUs, p.GPUMilli = 1, d.shareMilli
	case d.shares > 0:
		return p, false // a share beside whole GPUs, or several shares: not one shape
	}
	return p, true
}

// shareMilli is the part of one GPU a share request reserves: its compute percent.
func shareMilli(r *resourceapi.ExactDeviceRequest) int64 {
	if r.Capacity == nil {
		return 0
	}
	q, ok := r.Capacity.Requests[api.CapCompute]
	if !ok {
		return 0
	}
	return q.Value() * placement.MilliPerGPU / 100
}

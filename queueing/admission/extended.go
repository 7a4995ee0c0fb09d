package admission

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gpudra/gpudra/internal/podrequests"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Pods may ask for devices without a claim: a container requesting an extended resource
// that a DeviceClass names in spec.extendedResourceName (e.g. gpudra.dev/nvlink-group-4: 1)
// gets a claim for that many devices of the class, made by kube-scheduler
// (DRAExtendedResource, GA in Kubernetes 1.37). That is how an NVLink group is asked for
// through Kueue and charged in GPUs (deployments/kueue/config/kueue-config.yaml), and how
// pods written for NVIDIA's device plugin ask for devices: nvidia.com/gpu is a whole GPU
// (gpu.gpudra.dev), nvidia.com/mig-1g.10gb a MIG device of that profile
// (mig-1g.10gb.gpudra.dev). The check plans those devices as it plans the pods' claim
// templates.

// extendedResourceClasses resolves DRA-backed extended resources to DeviceClasses the way
// kube-scheduler does: a class's spec.extendedResourceName (when two classes name the same
// resource, the newer class wins, then the lower name) and its implicit name
// deviceclass.resource.kubernetes.io/<class>.
func extendedResourceClasses(classes []resourceapi.DeviceClass) map[corev1.ResourceName]string {
	out := map[corev1.ResourceName]string{}
	chosen := map[corev1.ResourceName]*resourceapi.DeviceClass{}
	for k := range classes {
		c := &classes[k]
		out[corev1.ResourceName(resourceapi.ResourceDeviceClassPrefix+c.Name)] = c.Name
		if c.Spec.ExtendedResourceName == nil {
			continue
		}
		name := corev1.ResourceName(*c.Spec.ExtendedResourceName)
		if prev := chosen[name]; prev != nil {
			newer := c.CreationTimestamp.After(prev.CreationTimestamp.Time)
			if !newer && !(c.CreationTimestamp.Equal(&prev.CreationTimestamp) && c.Name < prev.Name) {
				continue
			}
		}
		chosen[name] = c
		out[name] = c.Name
	}
	return out
}

// extendedClaim is the claim kube-scheduler would make for a pod's DRA-backed extended
// resources: one request per resource for the pod's effective request (the larger of the
// sum over its containers and its largest init container, as Kueue counts it; a limit
// without a request counts as the request, as the API server defaults it on the pod). It
// returns nil when the pod asks for none. A resource a node offers through a device plugin
// (nvidia.com/gpu where NVIDIA's device plugin runs) is not DRA-backed on that node; the
// check plans gpudra devices for it all the same and pins the pods to the planned nodes.
func extendedClaim(spec *corev1.PodSpec, classes map[corev1.ResourceName]string) (*resourceapi.ResourceClaimSpec, error) {
	requests := podrequests.Effective(spec)
	var names []corev1.ResourceName
	for name, q := range requests {
		if _, ok := classes[name]; ok && !q.IsZero() {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	slices.Sort(names)
	claim := &resourceapi.ResourceClaimSpec{}
	for k, name := range names {
		q := requests[name]
		n, ok := q.AsInt64()
		if !ok || n < 1 {
			return nil, badInput{fmt.Errorf("resources.requests[%s]=%s: a DRA-backed extended resource must be a whole number of devices", name, q.String())}
		}
		claim.Devices.Requests = append(claim.Devices.Requests, resourceapi.DeviceRequest{
			Name: fmt.Sprintf("extended-resource-%d", k),
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: classes[name],
				AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
				Count:           n,
			},
		})
	}
	return claim, nil
}

// mayRequestExtended reports whether any container requests a resource that could be
// DRA-backed (a domain-prefixed extended resource), so DeviceClasses are listed only then.
func mayRequestExtended(spec *corev1.PodSpec) bool {
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range cs {
			for name := range c.Resources.Requests {
				if strings.Contains(string(name), "/") {
					return true
				}
			}
			for name := range c.Resources.Limits {
				if strings.Contains(string(name), "/") {
					return true
				}
			}
		}
	}
	return false
}

// extendedClasses lists the DeviceClasses once per workload, when a pod set needs them.
type extendedClasses struct {
	c       client.Reader
	byName  map[corev1.ResourceName]string
	listed  bool
	listErr error
}

// claim is the extended-resource claim of a pod template, or nil.
func (e *extendedClasses) claim(ctx context.Context, spec *corev1.PodSpec) (*resourceapi.ResourceClaimSpec, error) {
	if !mayRequestExtended(spec) {
		return nil, nil
	}
	if !e.listed {
		var list resourceapi.DeviceClassList
		e.listErr = e.c.List(ctx, &list)
		e.byName, e.listed = extendedResourceClasses(list.Items), true
	}
	if e.listErr != nil {
		return nil, fmt.Errorf("listing DeviceClasses for extended resources: %w", e.listErr)
	}
	return extendedClaim(spec, e.byName)
}

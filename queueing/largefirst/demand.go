package largefirst

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/internal/podrequests"
)

// A job's GPU demand is counted the way Kueue charges it to gpudra.dev/gpu-percent
// (deployments/kueue/config/kueue-config.yaml), in hundredths of a GPU, for one pod and
// then times the job's pods:
//
//   - a claim template's request of gpu.gpudra.dev: 100 per device;
//   - of nvlink-group-<n>.gpudra.dev: 100·n per group; of nvlink-group.gpudra.dev, whose
//     size the request does not fix: 200, the smallest group;
//   - of gpu-share.gpudra.dev: the compute it asks for (capacity.requests.compute);
//   - the extended resources nvidia.com/gpu (100) and gpudra.dev/nvlink-group-<n> (100·n),
//     and deviceclass.resource.kubernetes.io/<class> as a request of that class.
//
// MIG devices count nothing: their part of a GPU depends on the card, and the bands are
// for jobs of whole GPUs. A ResourceClaim named by the pod template (not a template) is
// one claim all pods share and counts nothing either.

// claimTemplates finds a namespace's ResourceClaimTemplates by name.
type claimTemplates func(name string) (*resourceapi.ResourceClaimTemplate, error)

// Demand is the job's GPU demand in hundredths of a GPU. Its claim templates are read
// from c in the job's namespace; a template that does not exist yet counts nothing.
func Demand(ctx context.Context, c client.Reader, job *batchv1.Job) (int64, error) {
	templates := func(name string) (*resourceapi.ResourceClaimTemplate, error) {
		var t resourceapi.ResourceClaimTemplate
		err := c.Get(ctx, client.ObjectKey{Namespace: job.Namespace, Name: name}, &t)
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading ResourceClaimTemplate %s/%s: %w", job.Namespace, name, err)
		}
		return &t, nil
	}
	perPod, err := podDemand(&job.Spec.Template.Spec, templates)
	if err != nil {
		return 0, err
	}
	return perPod * int64(pods(&job.Spec)), nil
}

// pods is how many pods of a job run at once, as Kueue counts a Job's pod set: its
// parallelism (1 when unset), or its completions when fewer.
func pods(spec *batchv1.JobSpec) int32 {
	n := int32(1)
	if spec.Parallelism != nil {
		n = *spec.Parallelism
	}
	if spec.Completions != nil && *spec.Completions < n {
		n = *spec.Completions
	}
	return n
}

// podDemand is one pod's GPU demand in hundredths of a GPU.
func podDemand(spec *corev1.PodSpec, templates claimTemplates) (int64, error) {
	var sum int64
	for _, rc := range spec.ResourceClaims {
		if rc.ResourceClaimTemplateName == nil {
			continue
		}
		t, err := templates(*rc.ResourceClaimTemplateName)
		if err != nil {
			return 0, err
		}
		if t == nil {
			continue
		}
		for _, r := range t.Spec.Spec.Devices.Requests {
			if r.Exactly != nil {
				sum += requestDemand(r.Exactly)
			}
		}
	}
	for name, q := range podrequests.Effective(spec) {
		n, ok := q.AsInt64()
		if !ok || n < 1 {
			continue
		}
		sum += n * extendedDemand(name)
	}
	return sum, nil
}

// requestDemand is what one device request of a claim is charged.
func requestDemand(r *resourceapi.ExactDeviceRequest) int64 {
	if r.AllocationMode == resourceapi.DeviceAllocationModeAll {
		return 0 // Kueue refuses it
	}
	count := r.Count
	if count < 1 {
		count = 1
	}
	if r.DeviceClassName == api.DeviceClassShare {
		if r.Capacity == nil {
			return 0
		}
		compute, ok := r.Capacity.Requests[api.CapCompute]
		if !ok {
			return 0
		}
		return count * compute.Value()
	}
	return count * classDemand(r.DeviceClassName)
}

// classDemand is what one device of a DeviceClass is counted: whole GPUs and NVLink and
// XGMI groups by their GPUs, anything else nothing (shares are counted by their request).
func classDemand(class string) int64 {
	if n, ok := api.ClassGPUs(class); ok {
		return 100 * int64(n)
	}
	return 0
}

// extendedDemand is what one unit of an extended resource is counted.
func extendedDemand(name corev1.ResourceName) int64 {
	s := string(name)
	switch s {
	case api.ExtendedResourceNVIDIAGPU, api.ExtendedResourceAMDGPU, api.ExtendedResourceHygonDCU:
		return 100
	}
	if class, ok := strings.CutPrefix(s, resourceapi.ResourceDeviceClassPrefix); ok {
		return classDemand(class)
	}
	if n, ok := groupSize(s, "gpudra.dev/nvlink-group-", ""); ok {
		return 100 * n
	}
	return 0
}

// groupSize reads n from prefix<n>suffix.
func groupSize(s, prefix, suffix string) (int64, bool) {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return 0, false
	}
	rest, ok = strings.CutSuffix(rest, suffix)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	return n, err == nil && n > 0
}

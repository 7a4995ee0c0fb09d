package convert

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// HAMiPlan is how a pod written for HAMi asks gpudra for the same devices: a claim spec
// with one request per container that asks for GPUs.
type HAMiPlan struct {
	// Spec is the claim's spec.
	Spec resourceapi.ResourceClaimSpec
	// Requests maps a container's name to its request in Spec.
	Requests map[string]string
	// NotCarried says, by field path, what of the pod's HAMi names gpudra does not carry
	// over (scheduler policies, a compute cap on a whole GPU).
	NotCarried []string
}

// HAMiPod plans the conversion of a pod whose nvidia.com resources and annotations are
// HAMi's (every nvidia.com/gpu is read as HAMi reads it: a whole GPU unless memory is
// asked). It returns nil when no container asks for a GPU, and an error naming each field
// whose value is out of range or cannot be carried over, with the accepted values.
func HAMiPod(pod *corev1.Pod) (*HAMiPlan, error) {
	var errs field.ErrorList
	annPath := field.NewPath("metadata", "annotations")
	selectors, annFindings, annErrs := HAMiSelectors(pod.Annotations)
	for _, e := range annErrs {
		v := pod.Annotations[e.Field]
		errs = append(errs, field.Invalid(annPath.Key(e.Field), v, strings.TrimPrefix(e.Message, strconv.Quote(v)+": ")))
	}
	plan := &HAMiPlan{Requests: map[string]string{}}
	for _, f := range annFindings {
		if f.Level == NotConverted {
			plan.NotCarried = append(plan.NotCarried, fmt.Sprintf("%s: %s", annPath.Key(f.Field), f.Message))
		}
	}
	names := newNamer()
	total := int64(0)
	spec := field.NewPath("spec")
	for _, list := range []struct {
		name string
		ctrs []corev1.Container
	}{{"initContainers", pod.Spec.InitContainers}, {"containers", pod.Spec.Containers}} {
		for ci, ctr := range list.ctrs {
			at := spec.Child(list.name).Index(ci).Child("resources")
			var h HAMiContainer
			where := map[string]*field.Path{}
			for _, rl := range []struct {
				name string
				list corev1.ResourceList
			}{{"limits", ctr.Resources.Limits}, {"requests", ctr.Resources.Requests}} {
				for _, r := range slices.Sorted(maps.Keys(rl.list)) {
					q, name := rl.list[r], string(r)
					if !nvidiaKey(name) || where[name] != nil {
						continue
					}
					p := at.Child(rl.name).Key(name)
					where[name] = p
					val := q.String()
					if other, ok := ctr.Resources.Requests[r]; ok && rl.name == "limits" && other.Cmp(q) != 0 {
						errs = append(errs, field.Invalid(p, val, fmt.Sprintf("limits and requests (%s) differ; a HAMi resource must have equal ones", other.String())))
						continue
					}
					switch name {
					case dpGPU:
						h.GPU = val
					case HAMiMemory:
						h.Memory = val
					case HAMiMemoryPercent:
						h.MemoryPercent = val
					case HAMiCores:
						h.Cores = val
					case HAMiPriority:
						h.Priority = val
					default:
						errs = append(errs, field.NotSupported(p, name, append([]string{dpGPU}, hamiResources...)))
					}
				}
			}
			if !h.asks() {
				continue
			}
			ask, findings, rerrs := HAMiRequest(h, selectors)
			req := ask.Request
			pathOf := func(f Finding) *field.Path {
				if p := where[f.Field]; p != nil {
					return p
				}
				return at.Key(f.Field)
			}
			for _, e := range rerrs {
				v := h.value(e.Field)
				errs = append(errs, field.Invalid(pathOf(e), v, strings.TrimPrefix(e.Message, strconv.Quote(v)+": ")))
			}
			if len(rerrs) > 0 {
				continue
			}
			for _, f := range findings {
				if f.Level == NotConverted {
					plan.NotCarried = append(plan.NotCarried, fmt.Sprintf("%s: %s", pathOf(f), f.Message))
				}
			}
			total += req.Count
			suffix := "gpu"
			if req.DeviceClassName == api.DeviceClassShare {
				suffix = "share"
			}
			name := names.unique("", dnsLabel(ctr.Name+"-"+suffix, maxLabel), maxLabel)
			plan.Requests[ctr.Name] = name
			plan.Spec.Devices.Requests = append(plan.Spec.Devices.Requests, resourceapi.DeviceRequest{Name: name, Exactly: &req})
			if ask.Priority != "" {
				plan.Spec.Devices.Config = append(plan.Spec.Devices.Config, resourceapi.DeviceClaimConfiguration{Requests: []string{name},
					DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: api.DriverName, Parameters: runtime.RawExtension{Raw: priorityConfig(ask.Priority)}}}})
			}
			if ask.Distinct {
				attr := resourceapi.FullyQualifiedName(api.DriverName + "/" + api.AttrUUID)
				plan.Spec.Devices.Constraints = append(plan.Spec.Devices.Constraints, resourceapi.DeviceConstraint{Requests: []string{name}, DistinctAttribute: &attr})
			}
		}
	}
	if total > maxDevices {
		errs = append(errs, field.Invalid(spec.Child("containers"), total, fmt.Sprintf("the pod asks for %d GPUs in all; a ResourceClaim holds at most %d", total, maxDevices)))
	}
	if len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	if len(plan.Requests) == 0 {
		return nil, nil
	}
	return plan, nil
}

func (h HAMiContainer) value(name string) string {
	switch name {
	case dpGPU:
		return h.GPU
	case HAMiMemory:
		return h.Memory
	case HAMiMemoryPercent:
		return h.MemoryPercent
	case HAMiCores:
		return h.Cores
	case HAMiPriority:
		return h.Priority
	}
	return ""
}

// Apply rewrites pod to use the plan's claim: each container that asked for GPUs gets its
// request of the pod claim claimName, made from ResourceClaimTemplate template, and loses
// its HAMi resources.
func (p *HAMiPlan) Apply(pod *corev1.Pod, claimName, template string) {
	for _, ctrs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range ctrs {
			ctr := &ctrs[i]
			req, ok := p.Requests[ctr.Name]
			if !ok {
				continue
			}
			for _, r := range append([]string{dpGPU}, hamiResources...) {
				delete(ctr.Resources.Limits, corev1.ResourceName(r))
				delete(ctr.Resources.Requests, corev1.ResourceName(r))
			}
			if len(ctr.Resources.Limits) == 0 {
				ctr.Resources.Limits = nil
			}
			if len(ctr.Resources.Requests) == 0 {
				ctr.Resources.Requests = nil
			}
			ctr.Resources.Claims = append(ctr.Resources.Claims, corev1.ResourceClaim{Name: claimName, Request: req})
		}
	}
	pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: claimName, ResourceClaimTemplateName: &template})
}

// ClaimName is a pod claim name the pod does not use yet: "gpus", else "gpus-2", ...
func ClaimName(pod *corev1.Pod) string {
	n := newNamer()
	for _, rc := range pod.Spec.ResourceClaims {
		n.take(rc.Name)
	}
	return n.unique("", "gpus", maxLabel)
}

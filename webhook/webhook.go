// Package webhook is the admission webhook that refuses gpudra opaque configurations
// (gpu.gpudra.dev/v1alpha1) in ResourceClaims, ResourceClaimTemplates and DeviceClasses when
// they are written, with the same validation the kubelet plugin runs again at prepare.
package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// Path is where the handler is served.
const Path = "/validate-gpudra-config"

// Handler validates gpudra's opaque configs in the objects that carry them.
type Handler struct{}

var _ admission.Handler = Handler{}

// Handle admits an object whose gpudra configs are valid and denies it otherwise, with
// every problem's field path in the message.
func (Handler) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Operation == admissionv1.Delete {
		return admission.Allowed("")
	}
	var configs []configAt
	var tiers func() field.ErrorList
	switch req.Kind.Kind {
	case "ResourceClaim":
		var o resourceapi.ResourceClaim
		if err := json.Unmarshal(req.Object.Raw, &o); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		configs = claimConfigs(o.Spec, field.NewPath("spec"))
		tiers = shareTiers(o.Spec, field.NewPath("spec"))
	case "ResourceClaimTemplate":
		var o resourceapi.ResourceClaimTemplate
		if err := json.Unmarshal(req.Object.Raw, &o); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		configs = claimConfigs(o.Spec.Spec, field.NewPath("spec", "spec"))
		tiers = shareTiers(o.Spec.Spec, field.NewPath("spec", "spec"))
	case "DeviceClass":
		var o resourceapi.DeviceClass
		if err := json.Unmarshal(req.Object.Raw, &o); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		for k, c := range o.Spec.Config {
			configs = append(configs, configAt{c.Opaque, field.NewPath("spec", "config").Index(k).Child("opaque", "parameters")})
		}
	default:
		return admission.Allowed(fmt.Sprintf("%s carries no gpudra configuration", req.Kind.Kind))
	}
	var errs field.ErrorList
	for _, c := range configs {
		if c.opaque == nil || c.opaque.Driver != api.DriverName {
			continue
		}
		if err := api.ValidateOpaque(c.opaque.Parameters.Raw, c.path); err != nil {
			errs = append(errs, field.Invalid(c.path, "", err.Error()))
		}
	}
	if len(errs) == 0 && tiers != nil {
		for _, e := range tiers() {
			errs = append(errs, &field.Error{Type: e.Type, Field: e.Field, Detail: e.Error()})
		}
	}
	if len(errs) > 0 {
		msgs := ""
		for k, e := range errs {
			if k > 0 {
				msgs += "; "
			}
			msgs += e.Detail
		}
		return admission.Denied("invalid gpu.gpudra.dev configuration: " + msgs)
	}
	return admission.Allowed("")
}

type configAt struct {
	opaque *resourceapi.OpaqueDeviceConfiguration
	path   *field.Path
}

func claimConfigs(spec resourceapi.ResourceClaimSpec, path *field.Path) []configAt {
	var out []configAt
	for k, c := range spec.Devices.Config {
		out = append(out, configAt{c.Opaque, path.Child("devices", "config").Index(k).Child("opaque", "parameters")})
	}
	return out
}

// shareTiers checks each valid GpuConfig's share tier against the compute the requests it
// applies to ask for: a Guaranteed share needs a compute request (its floor) no higher than
// its computeLimit, a BestEffort share none, and a tier other than Fixed only applies to
// requests of the share class. It runs once every config decodes.
func shareTiers(spec resourceapi.ResourceClaimSpec, path *field.Path) func() field.ErrorList {
	return func() field.ErrorList {
		var errs field.ErrorList
		for k, c := range spec.Devices.Config {
			if c.Opaque == nil || c.Opaque.Driver != api.DriverName {
				continue
			}
			obj, err := api.Decode(c.Opaque.Parameters.Raw)
			if err != nil {
				continue
			}
			gc, ok := obj.(*api.GpuConfig)
			if !ok || gc.Limits == nil {
				continue
			}
			gc.Normalize()
			at := path.Child("devices", "config").Index(k).Child("opaque", "parameters", "limits")
			for _, r := range exactRequests(spec) {
				if len(c.Requests) > 0 && !slices.Contains(c.Requests, r.name) && !slices.Contains(c.Requests, r.parent) {
					continue
				}
				if r.class != api.DeviceClassShare {
					if gc.Limits.Policy != api.PolicyFixed || gc.Limits.ComputeLimit != nil || gc.Limits.Priority != "" {
						errs = append(errs, field.Invalid(at, "", fmt.Sprintf("request %q asks for DeviceClass %s: a share's policy, computeLimit and priority apply only to requests of %s", r.name, r.class, api.DeviceClassShare)))
					}
					continue
				}
				errs = append(errs, gc.Limits.ValidateFor(at, r.compute)...)
			}
		}
		return errs
	}
}

type exactRequest struct {
	name, parent, class string
	compute             int
}

// exactRequests lists a claim's requests and first-available subrequests ("req/sub"),
// with the compute capacity each asks for (0 when it asks for none: the share's default).
func exactRequests(spec resourceapi.ResourceClaimSpec) []exactRequest {
	compute := func(c *resourceapi.CapacityRequirements) int {
		if c == nil {
			return 0
		}
		for _, name := range []resourceapi.QualifiedName{api.CapCompute, api.DriverName + "/" + api.CapCompute} {
			if q, ok := c.Requests[name]; ok {
				return int(q.Value())
			}
		}
		return 0
	}
	var out []exactRequest
	for _, r := range spec.Devices.Requests {
		if e := r.Exactly; e != nil {
			out = append(out, exactRequest{name: r.Name, class: e.DeviceClassName, compute: compute(e.Capacity)})
		}
		for _, sub := range r.FirstAvailable {
			out = append(out, exactRequest{name: r.Name + "/" + sub.Name, parent: r.Name, class: sub.DeviceClassName, compute: compute(sub.Capacity)})
		}
	}
	return out
}

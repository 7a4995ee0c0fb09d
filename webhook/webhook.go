// Package webhook holds gpudra-controller's admission webhooks: the one that refuses gpudra
// opaque configurations (gpu.gpudra.dev/v1alpha1) in ResourceClaims, ResourceClaimTemplates
// and DeviceClasses when they are written, with the same validation the kubelet plugin runs
// again at prepare, and the one that rewrites pods written for HAMi into pods with gpudra
// claims as they are created (HAMiPods).
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
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
	errs, err := Validate(req.Kind.Kind, req.Object.Raw)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if len(errs) > 0 {
		msgs := ""
		for k, e := range errs {
			if k > 0 {
				msgs += "; "
			}
			msgs += e.Error()
		}
		return admission.Denied("invalid gpu.gpudra.dev configuration: " + msgs)
	}
	return admission.Allowed("")
}

// Validate checks the gpudra configs of one object of kind (ResourceClaim,
// ResourceClaimTemplate or DeviceClass; other kinds carry none), given as JSON: each
// config decoded strictly and validated, then the share tiers of a claim's requests. The
// errors carry the field paths; err is set only when raw is not an object of that kind.
func Validate(kind string, raw []byte) (field.ErrorList, error) {
	var configs []configAt
	var tiers func() field.ErrorList
	switch kind {
	case "ResourceClaim":
		var o resourceapi.ResourceClaim
		if err := json.Unmarshal(raw, &o); err != nil {
			return nil, err
		}
		configs = claimConfigs(o.Spec, field.NewPath("spec"))
		tiers = shareTiers(o.Spec, field.NewPath("spec"))
	case "ResourceClaimTemplate":
		var o resourceapi.ResourceClaimTemplate
		if err := json.Unmarshal(raw, &o); err != nil {
			return nil, err
		}
		configs = claimConfigs(o.Spec.Spec, field.NewPath("spec", "spec"))
		tiers = shareTiers(o.Spec.Spec, field.NewPath("spec", "spec"))
	case "DeviceClass":
		var o resourceapi.DeviceClass
		if err := json.Unmarshal(raw, &o); err != nil {
			return nil, err
		}
		for k, c := range o.Spec.Config {
			configs = append(configs, configAt{c.Opaque, field.NewPath("spec", "config").Index(k).Child("opaque", "parameters")})
		}
		tiers = classTiers(o)
	default:
		return nil, nil
	}
	var errs field.ErrorList
	for _, c := range configs {
		if c.opaque == nil || c.opaque.Driver != api.DriverName {
			continue
		}
		errs = append(errs, fieldErrors(api.ValidateOpaque(c.opaque.Parameters.Raw, c.path), c.path)...)
	}
	if len(errs) == 0 && tiers != nil {
		errs = append(errs, tiers()...)
	}
	return errs, nil
}

// fieldErrors lists err's field errors (ValidateOpaque's aggregate); any other error is
// one error at path.
func fieldErrors(err error, path *field.Path) field.ErrorList {
	if err == nil {
		return nil
	}
	var fe *field.Error
	var agg utilerrors.Aggregate
	switch {
	case errors.As(err, &agg):
		var out field.ErrorList
		for _, e := range agg.Errors() {
			out = append(out, fieldErrors(e, path)...)
		}
		return out
	case errors.As(err, &fe):
		return field.ErrorList{fe}
	}
	return field.ErrorList{field.Invalid(path, "", err.Error())}
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
// requests of the share class. A share's compute request out of range is refused. It runs
// once every config decodes.
func shareTiers(spec resourceapi.ResourceClaimSpec, path *field.Path) func() field.ErrorList {
	return func() field.ErrorList {
		requests, errs := exactRequests(spec, path)
		for k, c := range spec.Devices.Config {
			limits := shareLimits(c.Opaque)
			if limits == nil {
				continue
			}
			at := path.Child("devices", "config").Index(k).Child("opaque", "parameters", "limits")
			for _, r := range requests {
				if len(c.Requests) > 0 && !slices.Contains(c.Requests, r.name) && !slices.Contains(c.Requests, r.parent) {
					continue
				}
				if r.class != api.DeviceClassShare {
					if hasTier(limits) {
						errs = append(errs, field.Invalid(at, "", fmt.Sprintf("request %q asks for DeviceClass %s: a share's policy, computeLimit and priority apply only to requests of %s", r.name, r.class, api.DeviceClassShare)))
					}
					continue
				}
				if r.compute >= 0 {
					errs = append(errs, limits.ValidateFor(at, r.compute)...)
				}
			}
		}
		return errs
	}
}

// classTiers checks the share tier of a DeviceClass's GpuConfigs as a claim's are checked
// for a request of that class: a tier other than Fixed only in the share class. The compute
// its claims will request is not known here; prepare checks the tier against it.
func classTiers(class resourceapi.DeviceClass) func() field.ErrorList {
	return func() field.ErrorList {
		if class.Name == api.DeviceClassShare {
			return nil
		}
		var errs field.ErrorList
		for k, c := range class.Spec.Config {
			if limits := shareLimits(c.Opaque); limits != nil && hasTier(limits) {
				at := field.NewPath("spec", "config").Index(k).Child("opaque", "parameters", "limits")
				errs = append(errs, field.Invalid(at, "", fmt.Sprintf("DeviceClass %s is not %s: a share's policy, computeLimit and priority apply only to that class's requests", class.Name, api.DeviceClassShare)))
			}
		}
		return errs
	}
}

// shareLimits are the normalized limits of a gpudra GpuConfig that sets them; nil for
// anything else.
func shareLimits(opaque *resourceapi.OpaqueDeviceConfiguration) *api.ShareLimits {
	if opaque == nil || opaque.Driver != api.DriverName {
		return nil
	}
	obj, err := api.Decode(opaque.Parameters.Raw)
	if err != nil {
		return nil
	}
	gc, ok := obj.(*api.GpuConfig)
	if !ok || gc.Limits == nil {
		return nil
	}
	gc.Normalize()
	return gc.Limits
}

// hasTier is whether normalized limits set a share's tier: a policy other than Fixed, a
// computeLimit or a priority.
func hasTier(l *api.ShareLimits) bool {
	return l.Policy != api.PolicyFixed || l.ComputeLimit != nil || l.Priority != ""
}

type exactRequest struct {
	name, parent, class string
	compute             int
}

// exactRequests lists a claim's requests and first-available subrequests ("req/sub"),
// with the compute capacity each share asks for (0 when it asks for none: the share's
// default). A share's compute request out of range is an error naming its path, and its
// compute -1; so is a capacity request of one of gpudra's whole-device classes.
func exactRequests(spec resourceapi.ResourceClaimSpec, path *field.Path) ([]exactRequest, field.ErrorList) {
	var errs field.ErrorList
	compute := func(class string, c *resourceapi.CapacityRequirements, at *field.Path) int {
		if c == nil || class != api.DeviceClassShare {
			return 0
		}
		for _, name := range []resourceapi.QualifiedName{api.CapCompute, api.DriverName + "/" + api.CapCompute} {
			if q, ok := c.Requests[name]; ok {
				percent, err := api.ComputePercent(at.Child("capacity", "requests").Key(string(name)), q)
				if err != nil {
					errs = append(errs, err)
					return -1
				}
				return percent
			}
		}
		return 0
	}
	// A device of a whole-device class is allocated whole whatever capacity a request
	// asks, while Kueue charges a queue the compute asked: refused, so that a whole GPU is
	// never charged 1 %.
	whole := func(class string, c *resourceapi.CapacityRequirements, at *field.Path) {
		if c == nil || len(c.Requests) == 0 || !api.WholeDeviceClass(class) {
			return
		}
		errs = append(errs, field.Forbidden(at.Child("capacity", "requests"), fmt.Sprintf(
			"DeviceClass %s selects devices that are allocated whole whatever capacity a request asks, and a queue charges a whole device by its size: "+
				"drop capacity.requests, or ask for DeviceClass %s for a part of a GPU", class, api.DeviceClassShare)))
	}
	var out []exactRequest
	requests := path.Child("devices", "requests")
	for i, r := range spec.Devices.Requests {
		if e := r.Exactly; e != nil {
			whole(e.DeviceClassName, e.Capacity, requests.Index(i).Child("exactly"))
			out = append(out, exactRequest{name: r.Name, class: e.DeviceClassName, compute: compute(e.DeviceClassName, e.Capacity, requests.Index(i).Child("exactly"))})
		}
		for j, sub := range r.FirstAvailable {
			whole(sub.DeviceClassName, sub.Capacity, requests.Index(i).Child("firstAvailable").Index(j))
			out = append(out, exactRequest{name: r.Name + "/" + sub.Name, parent: r.Name, class: sub.DeviceClassName,
				compute: compute(sub.DeviceClassName, sub.Capacity, requests.Index(i).Child("firstAvailable").Index(j))})
		}
	}
	return out, errs
}

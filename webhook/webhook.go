// Package webhook is the admission webhook that refuses gpudra opaque configurations
// (gpu.gpudra.dev/v1alpha1) in ResourceClaims, ResourceClaimTemplates and DeviceClasses when
// they are written, with the same validation the kubelet plugin runs again at prepare.
package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

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
	switch req.Kind.Kind {
	case "ResourceClaim":
		var o resourceapi.ResourceClaim
		if err := json.Unmarshal(req.Object.Raw, &o); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		configs = claimConfigs(o.Spec, field.NewPath("spec"))
	case "ResourceClaimTemplate":
		var o resourceapi.ResourceClaimTemplate
		if err := json.Unmarshal(req.Object.Raw, &o); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		configs = claimConfigs(o.Spec.Spec, field.NewPath("spec", "spec"))
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

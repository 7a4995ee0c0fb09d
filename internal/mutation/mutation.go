package mutation

import (
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// DecodeCreate decodes into obj (a kind, as "Job", named in the error) the object a Create
// request admits. When ok is false the handler answers resp: allowed for other operations,
// a 400 error for an object that does not decode.
func DecodeCreate(req admission.Request, kind string, obj any) (resp admission.Response, ok bool) {
	if req.Operation != admissionv1.Create {
		return admission.Allowed(""), false
	}
	if err := json.Unmarshal(req.Object.Raw, obj); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the %s: %w", kind, err)), false
	}
	return admission.Response{}, true
}

// Patch answers req with the JSON patch that turns the object it admits into obj.
func Patch(req admission.Request, obj any) admission.Response {
	mutated, err := json.Marshal(obj)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, mutated)
}

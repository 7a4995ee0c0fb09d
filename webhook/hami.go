package webhook

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/gpudra/gpudra/convert"
	"github.com/gpudra/gpudra/internal/mutation"
)

// HAMiPath is where the HAMi pod handler is served.
const HAMiPath = "/mutate-hami-pods"

// HAMiConfigurationName is the MutatingWebhookConfiguration the chart installs for HAMi
// pods (feature gate HAMiPods).
const HAMiConfigurationName = "gpudra-hami-pods"

// HAMiTemplateLabel marks the ResourceClaimTemplates the HAMi pod handler creates.
const HAMiTemplateLabel = "gpudra.dev/hami-pods"

// HAMiPods rewrites pods written for HAMi, as they are created, into pods with a gpudra
// claim: their nvidia.com/gpu, gpumem, gpumem-percentage and gpucores resources are
// removed, and a claim from a ResourceClaimTemplate in the pod's namespace asks for the
// same GPUs, shares and card choices (convert.HAMiPod). A pod whose values cannot be
// carried over is refused, naming the field and the accepted values, so that it never
// runs without the limits it asked for.
type HAMiPods struct {
	// Client creates the ResourceClaimTemplates.
	Client client.Client
}

var _ admission.Handler = HAMiPods{}

// Handle converts a pod at creation; other operations and pods without GPUs pass.
func (h HAMiPods) Handle(ctx context.Context, req admission.Request) admission.Response {
	var pod corev1.Pod
	if resp, ok := mutation.DecodeCreate(req, "Pod", &pod); !ok {
		return resp
	}
	plan, err := convert.HAMiPod(&pod)
	if err != nil {
		return admission.Denied("what the pod asks HAMi for cannot be carried over to gpudra: " + err.Error())
	}
	if plan == nil {
		return admission.Allowed("")
	}
	ns := pod.Namespace
	if ns == "" {
		ns = req.Namespace
	}
	tmpl, err := h.template(ctx, ns, plan.Spec, req.DryRun != nil && *req.DryRun)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	plan.Apply(&pod, convert.ClaimName(&pod), tmpl)
	resp := mutation.Patch(req, &pod)
	for _, w := range plan.NotCarried {
		resp.Warnings = append(resp.Warnings, "gpudra: "+w)
	}
	return resp
}

// template returns the name of a ResourceClaimTemplate in namespace ns with spec, created
// if missing. Its name is a hash of the spec, so every pod asking for the same devices
// shares one template: it outlives the pods (the claims made from it are the pods' own and
// go with them), and creating it again is a no-op. A dry run creates nothing.
func (h HAMiPods) template(ctx context.Context, ns string, spec resourceapi.ResourceClaimSpec, dryRun bool) (string, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(raw)
	name := "hami-" + hex.EncodeToString(sum[:])[:16]
	t := &resourceapi.ResourceClaimTemplate{}
	t.Name, t.Namespace = name, ns
	t.Labels = map[string]string{HAMiTemplateLabel: "true", "app.kubernetes.io/managed-by": "gpudra-controller"}
	t.Spec.Spec = spec
	if dryRun {
		return name, nil
	}
	err = h.Client.Create(ctx, t)
	if err == nil {
		return name, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("ResourceClaimTemplate %s/%s: %w", ns, name, err)
	}
	var have resourceapi.ResourceClaimTemplate
	if err := h.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &have); err != nil {
		return "", fmt.Errorf("ResourceClaimTemplate %s/%s: %w", ns, name, err)
	}
	if !sameJSON(have.Spec.Spec, spec) {
		return "", fmt.Errorf("ResourceClaimTemplate %s/%s exists with another spec; delete it to let pods asking HAMi for these GPUs be created", ns, name)
	}
	return name, nil
}

// sameJSON reports whether two claim specs read the same as JSON, whatever the spacing and
// key order the API server gave their opaque configs.
func sameJSON(a, b resourceapi.ResourceClaimSpec) bool {
	var va, vb any
	for _, x := range []struct {
		spec resourceapi.ResourceClaimSpec
		into *any
	}{{a, &va}, {b, &vb}} {
		raw, err := json.Marshal(x.spec)
		if err != nil || json.Unmarshal(raw, x.into) != nil {
			return false
		}
	}
	return reflect.DeepEqual(va, vb)
}

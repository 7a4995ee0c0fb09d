package mutation

import (
	"net/http"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

func request(op admissionv1.Operation, raw string) admission.Request {
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: op, Object: runtime.RawExtension{Raw: []byte(raw)}}}
}

func TestDecodeCreate(t *testing.T) {
	var pod corev1.Pod
	if resp, ok := DecodeCreate(request(admissionv1.Update, `{}`), "Pod", &pod); ok || !resp.Allowed {
		t.Errorf("an update: ok %v, allowed %v; want it allowed unread", ok, resp.Allowed)
	}
	resp, ok := DecodeCreate(request(admissionv1.Create, `{"metadata":`), "Pod", &pod)
	if ok || resp.Allowed || resp.Result.Code != http.StatusBadRequest || !strings.Contains(resp.Result.Message, "decoding the Pod") {
		t.Errorf("bad JSON: ok %v, allowed %v, result %+v; want a 400 naming the Pod", ok, resp.Allowed, resp.Result)
	}
	if _, ok := DecodeCreate(request(admissionv1.Create, `{"metadata":{"name":"p"}}`), "Pod", &pod); !ok || pod.Name != "p" {
		t.Errorf("a create: ok %v, name %q; want the pod read", ok, pod.Name)
	}
}

func TestPatch(t *testing.T) {
	req := request(admissionv1.Create, `{"metadata":{"name":"p"}}`)
	obj := map[string]any{"metadata": map[string]any{"name": "p", "labels": map[string]any{"a": "b"}}}
	resp := Patch(req, obj)
	if !resp.Allowed || len(resp.Patches) != 1 || resp.Patches[0].Path != "/metadata/labels" {
		t.Errorf("Patch = allowed %v, patches %+v; want one adding /metadata/labels", resp.Allowed, resp.Patches)
	}
}

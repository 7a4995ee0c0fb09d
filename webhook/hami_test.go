package webhook

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

func hamiPod(name string, annotations map[string]string, limits map[string]string) *corev1.Pod {
	p := &corev1.Pod{}
	p.Name, p.Namespace, p.Annotations = name, "team-a", annotations
	l := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	for k, v := range limits {
		l[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	p.Spec.Containers = []corev1.Container{{Name: "app", Image: "cuda", Resources: corev1.ResourceRequirements{Limits: l}}}
	return p
}

func podRequest(t *testing.T, pod *corev1.Pod) admission.Request {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Namespace: pod.Namespace,
		Kind:   metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Object: runtime.RawExtension{Raw: raw},
	}}
}

func fakeClient(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := resourceapi.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
}

// patched applies an admission response's patches to the request's pod.
func patched(t *testing.T, req admission.Request, resp admission.Response) *corev1.Pod {
	t.Helper()
	raw, err := json.Marshal(resp.Patches)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		t.Fatal(err)
	}
	out, err := patch.Apply(req.Object.Raw)
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := json.Unmarshal(out, &pod); err != nil {
		t.Fatal(err)
	}
	return &pod
}

func templates(t *testing.T, c client.Client) []resourceapi.ResourceClaimTemplate {
	t.Helper()
	var list resourceapi.ResourceClaimTemplateList
	if err := c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// A HAMi vGPU pod is created with a claim for a share of the memory and compute it asked
// for, its HAMi resources gone and its other resources kept.
func TestHAMiPodGetsAShareClaim(t *testing.T) {
	c := fakeClient(t)
	h := HAMiPods{Client: c}
	pod := hamiPod("p", map[string]string{"nvidia.com/use-gputype": "A100"}, map[string]string{"nvidia.com/gpu": "2", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "30", "nvidia.com/priority": "0"})
	req := podRequest(t, pod)
	resp := h.Handle(context.Background(), req)
	if !resp.Allowed {
		t.Fatalf("denied: %v", resp.Result)
	}
	got := patched(t, req, resp)
	ctr := got.Spec.Containers[0]
	for _, r := range []corev1.ResourceName{"nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/priority"} {
		if _, ok := ctr.Resources.Limits[r]; ok {
			t.Errorf("%s still in the limits: %v", r, ctr.Resources.Limits)
		}
	}
	if q := ctr.Resources.Limits[corev1.ResourceCPU]; q.String() != "1" {
		t.Errorf("cpu limit %v, want 1 kept", ctr.Resources.Limits)
	}
	if len(got.Spec.ResourceClaims) != 1 || got.Spec.ResourceClaims[0].ResourceClaimTemplateName == nil {
		t.Fatalf("pod claims %+v, want one from a template", got.Spec.ResourceClaims)
	}
	rc := got.Spec.ResourceClaims[0]
	if len(ctr.Resources.Claims) != 1 || ctr.Resources.Claims[0].Name != rc.Name {
		t.Errorf("container claims %+v, want %s", ctr.Resources.Claims, rc.Name)
	}
	ts := templates(t, c)
	if len(ts) != 1 || ts[0].Name != *rc.ResourceClaimTemplateName || ts[0].Namespace != "team-a" {
		t.Fatalf("templates %+v, want %s in team-a", ts, *rc.ResourceClaimTemplateName)
	}
	r := ts[0].Spec.Spec.Devices.Requests[0]
	if r.Name != ctr.Resources.Claims[0].Request || r.Exactly == nil || r.Exactly.DeviceClassName != "gpu-share.gpudra.dev" || r.Exactly.Count != 2 {
		t.Fatalf("request %+v", r)
	}
	if m, cpt := r.Exactly.Capacity.Requests["memory"], r.Exactly.Capacity.Requests["compute"]; m.Cmp(resource.MustParse("4000Mi")) != 0 || cpt.Cmp(resource.MustParse("30")) != 0 {
		t.Errorf("capacity %v, want memory 4000Mi and compute 30", r.Exactly.Capacity.Requests)
	}
	if len(r.Exactly.Selectors) != 1 || !strings.Contains(r.Exactly.Selectors[0].CEL.Expression, `contains("A100")`) {
		t.Errorf("selectors %+v, want the card type A100", r.Exactly.Selectors)
	}
	if cs := ts[0].Spec.Spec.Devices.Constraints; len(cs) != 1 || cs[0].DistinctAttribute == nil {
		t.Errorf("constraints %+v, want the two shares on distinct GPUs", cs)
	}
	cfg := ts[0].Spec.Spec.Devices.Config
	if len(cfg) != 1 || cfg[0].Opaque == nil || !strings.Contains(string(cfg[0].Opaque.Parameters.Raw), `"priority":"High"`) {
		t.Errorf("config %+v, want the shares' priority High (nvidia.com/priority 0)", cfg)
	}
	if errs, err := Validate("ResourceClaimTemplate", mustJSON(t, ts[0])); err != nil || len(errs) > 0 {
		t.Errorf("the config webhook refuses the template: %v %v", errs, err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// Pods that ask for the same devices share one template; a dry run creates none.
func TestHAMiPodsShareTemplates(t *testing.T) {
	c := fakeClient(t)
	h := HAMiPods{Client: c}
	ask := map[string]string{"nvidia.com/gpu": "1"}
	dry := podRequest(t, hamiPod("dry", nil, ask))
	dry.DryRun = ptr.To(true)
	if resp := h.Handle(context.Background(), dry); !resp.Allowed || len(resp.Patches) == 0 {
		t.Fatalf("dry run: %+v", resp)
	}
	if ts := templates(t, c); len(ts) != 0 {
		t.Errorf("a dry run created %d templates", len(ts))
	}
	var names []string
	for _, n := range []string{"a", "b"} {
		req := podRequest(t, hamiPod(n, nil, ask))
		resp := h.Handle(context.Background(), req)
		if !resp.Allowed {
			t.Fatalf("%s denied: %v", n, resp.Result)
		}
		names = append(names, *patched(t, req, resp).Spec.ResourceClaims[0].ResourceClaimTemplateName)
	}
	other := podRequest(t, hamiPod("c", nil, map[string]string{"nvidia.com/gpu": "2"}))
	resp := h.Handle(context.Background(), other)
	names = append(names, *patched(t, other, resp).Spec.ResourceClaims[0].ResourceClaimTemplateName)
	if names[0] != names[1] || names[0] == names[2] {
		t.Errorf("templates %v: want the first two equal, the third another", names)
	}
	if ts := templates(t, c); len(ts) != 2 {
		t.Errorf("%d templates, want 2", len(ts))
	}
}

func TestHAMiPodsAdmission(t *testing.T) {
	tests := []struct {
		name     string
		pod      *corev1.Pod
		allowed  bool
		patched  bool
		want     []string // in the denial's message, or the warnings
		warnings int
	}{
		{"a pod without GPUs passes unchanged", hamiPod("p", nil, nil), true, false, nil, 0},
		{"gpucores above 100 is refused naming the field and the range", hamiPod("p", nil, map[string]string{"nvidia.com/gpumem": "1024", "nvidia.com/gpucores": "150"}), false, false,
			[]string{"spec.containers[0].resources.limits[nvidia.com/gpucores]", "from 0 to 100"}, 0},
		{"a memory percent below 100 is refused", hamiPod("p", nil, map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}), false, false,
			[]string{"limits[nvidia.com/gpumem-percentage]", "nvidia.com/gpumem"}, 0},
		{"a resource HAMi does not serve is refused", hamiPod("p", nil, map[string]string{"nvidia.com/gpu": "1", "nvidia.com/mig-1g.5gb": "1"}), false, false,
			[]string{"limits[nvidia.com/mig-1g.5gb]", "nvidia.com/gpumem"}, 0},
		{"a bad card type is refused", hamiPod("p", map[string]string{"nvidia.com/use-gputype": "A100,"}, map[string]string{"nvidia.com/gpu": "1"}), false, false,
			[]string{"metadata.annotations[nvidia.com/use-gputype]", "card types"}, 0},
		{"a scheduler policy is admitted with a warning", hamiPod("p", map[string]string{"hami.io/gpu-scheduler-policy": "binpack"}, map[string]string{"nvidia.com/gpu": "1"}), true, true,
			[]string{"hami.io/gpu-scheduler-policy", "not carried over"}, 1},
		{"a compute cap on a whole GPU is admitted with a warning", hamiPod("p", nil, map[string]string{"nvidia.com/gpucores": "50"}), true, true,
			[]string{"nvidia.com/gpucores", "does not cap"}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := fakeClient(t)
			resp := HAMiPods{Client: c}.Handle(context.Background(), podRequest(t, tc.pod))
			if resp.Allowed != tc.allowed {
				t.Fatalf("allowed %v, want %v: %v", resp.Allowed, tc.allowed, resp.Result)
			}
			if (len(resp.Patches) > 0) != tc.patched {
				t.Errorf("patches %v, want some: %v", resp.Patches, tc.patched)
			}
			if len(resp.Warnings) != tc.warnings {
				t.Errorf("warnings %q, want %d", resp.Warnings, tc.warnings)
			}
			text := strings.Join(resp.Warnings, "\n")
			if resp.Result != nil {
				text += resp.Result.Message
			}
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("%q does not say %q", text, w)
				}
			}
			if !tc.allowed && len(templates(t, c)) > 0 {
				t.Errorf("a refused pod left a template behind")
			}
		})
	}
}

// A template the API server wrote back with its config spaced and ordered its own way is
// the same template: the next pod asking for the same devices reuses it.
func TestHAMiPodReusesATemplateAsTheServerWroteIt(t *testing.T) {
	ask := map[string]string{"nvidia.com/gpumem": "1024", "nvidia.com/priority": "1"}
	req := podRequest(t, hamiPod("p", nil, ask))
	c := fakeClient(t)
	name := *patched(t, req, HAMiPods{Client: c}.Handle(context.Background(), req)).Spec.ResourceClaims[0].ResourceClaimTemplateName
	stored := templates(t, c)[0]
	stored.ResourceVersion = ""
	stored.Spec.Spec.Devices.Config[0].Opaque.Parameters.Raw = []byte(`{"limits": {"priority": "Low"}, "kind": "GpuConfig", "apiVersion": "gpu.gpudra.dev/v1alpha1"}`)
	resp := HAMiPods{Client: fakeClient(t, &stored)}.Handle(context.Background(), podRequest(t, hamiPod("q", nil, ask)))
	if !resp.Allowed {
		t.Fatalf("refused with template %s as the server wrote it: %v", name, resp.Result)
	}
}

// A template of the hashed name with another spec is not used: the pod is not admitted
// with devices it did not ask for.
func TestHAMiPodRefusesAForeignTemplate(t *testing.T) {
	h := HAMiPods{Client: fakeClient(t)}
	req := podRequest(t, hamiPod("p", nil, map[string]string{"nvidia.com/gpu": "1"}))
	name := *patched(t, req, h.Handle(context.Background(), req)).Spec.ResourceClaims[0].ResourceClaimTemplateName
	foreign := &resourceapi.ResourceClaimTemplate{}
	foreign.Name, foreign.Namespace = name, "team-a"
	foreign.Spec.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "x", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.gpudra.dev", Count: 8}}}
	resp := HAMiPods{Client: fakeClient(t, foreign)}.Handle(context.Background(), req)
	if resp.Allowed {
		t.Fatalf("admitted with template %s of another spec", name)
	}
	if !strings.Contains(resp.Result.Message, "another spec") {
		t.Errorf("message %q", resp.Result.Message)
	}
}

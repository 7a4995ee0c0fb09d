package helm_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/diff"
)

// The HAMi pods' webhook is off by default; turned on (with its alpha gate) it rewrites pod
// creations in opted-in namespaces only, fails closed, and the controller may create the
// claim templates and inject the webhook's CA.
func TestHAMiPodsWebhook(t *testing.T) {
	if got := render(t).names("MutatingWebhookConfiguration"); len(got) > 0 {
		t.Errorf("defaults render %v, want no MutatingWebhookConfiguration", got)
	}
	out, err := template(t, []string{"webhook.hamiPods.enabled=true"})
	if err == nil || !strings.Contains(out, "webhook.hamiPods.enabled=true requires featureGates.HAMiPods=true (alpha)") {
		t.Errorf("without the gate: err %v, output %s", err, out)
	}
	out, err = template(t, []string{"webhook.hamiPods.enabled=true", "featureGates.HAMiPods=true", "webhook.hamiPods.namespaceSelector=null"})
	if err == nil || !strings.Contains(out, "namespaceSelector or objectSelector") {
		t.Errorf("without a selector: err %v, output %s", err, out)
	}

	m := render(t, "webhook.hamiPods.enabled=true", "featureGates.HAMiPods=true")
	mwc := m.get("MutatingWebhookConfiguration", "gpudra-hami-pods").(*admissionv1.MutatingWebhookConfiguration)
	if len(mwc.Webhooks) != 1 {
		t.Fatalf("webhooks %+v, want one", mwc.Webhooks)
	}
	w := mwc.Webhooks[0]
	if w.FailurePolicy == nil || *w.FailurePolicy != admissionv1.Fail {
		t.Errorf("failurePolicy %v, want Fail: a HAMi pod must not run unconstrained", w.FailurePolicy)
	}
	if w.SideEffects == nil || *w.SideEffects != admissionv1.SideEffectClassNoneOnDryRun {
		t.Errorf("sideEffects %v, want NoneOnDryRun (it creates claim templates)", w.SideEffects)
	}
	if s := w.ClientConfig.Service; s == nil || s.Path == nil || *s.Path != "/mutate-hami-pods" || s.Namespace != namespace {
		t.Errorf("clientConfig %+v, want the controller's Service at /mutate-hami-pods", w.ClientConfig)
	}
	if w.NamespaceSelector == nil || w.NamespaceSelector.MatchLabels["gpudra.dev/hami-pods"] != "enabled" {
		t.Errorf("namespaceSelector %+v, want gpudra.dev/hami-pods=enabled", w.NamespaceSelector)
	}
	if len(w.Rules) != 1 || !slices.Equal(w.Rules[0].Resources, []string{"pods"}) || !slices.Equal(w.Rules[0].Operations, []admissionv1.OperationType{admissionv1.Create}) {
		t.Errorf("rules %+v, want pod creations", w.Rules)
	}

	// Only pods asking for an nvidia.com resource reach the webhook.
	if len(w.MatchConditions) != 1 {
		t.Fatalf("matchConditions %+v", w.MatchConditions)
	}
	env, err := cel.NewEnv(cel.Variable("object", cel.DynType))
	if err != nil {
		t.Fatal(err)
	}
	ast, iss := env.Compile(w.MatchConditions[0].Expression)
	if iss.Err() != nil {
		t.Fatalf("%q: %v", w.MatchConditions[0].Expression, iss.Err())
	}
	prg, err := env.Program(ast)
	if err != nil {
		t.Fatal(err)
	}
	pod := func(init bool, res corev1.ResourceList) map[string]any {
		p := &corev1.Pod{}
		p.Spec.Containers = []corev1.Container{{Name: "a"}}
		c := corev1.Container{Name: "x", Resources: corev1.ResourceRequirements{Limits: res}}
		if init {
			p.Spec.InitContainers = []corev1.Container{c}
		} else {
			p.Spec.Containers = append(p.Spec.Containers, c)
		}
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	for _, tc := range []struct {
		name string
		obj  map[string]any
		want bool
	}{
		{"a pod without GPUs", pod(false, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}), false},
		{"a vGPU", pod(false, corev1.ResourceList{"nvidia.com/gpumem": resource.MustParse("1024")}), true},
		{"a GPU for an init container", pod(true, corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}), true},
	} {
		v, _, err := prg.Eval(map[string]any{"object": tc.obj})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if v.Value() != tc.want {
			t.Errorf("%s: sent to the webhook = %v, want %v", tc.name, v.Value(), tc.want)
		}
	}

	// A controller called at a URL is called at its HAMi path there too.
	withURL := []string{"webhook.hamiPods.enabled=true", "featureGates.HAMiPods=true", "webhook.url=https://10.0.0.1:9443/validate-gpudra-config", "webhook.caBundle=Y2E="}
	if out, err := template(t, withURL); err == nil || !strings.Contains(out, "set webhook.hamiPods.url too") {
		t.Errorf("webhook.url without webhook.hamiPods.url: err %v", err)
	}
	u := render(t, append(withURL, "webhook.hamiPods.url=https://10.0.0.1:9443/mutate-hami-pods")...).
		get("MutatingWebhookConfiguration", "gpudra-hami-pods").(*admissionv1.MutatingWebhookConfiguration).Webhooks[0].ClientConfig
	if u.URL == nil || *u.URL != "https://10.0.0.1:9443/mutate-hami-pods" || u.Service != nil || string(u.CABundle) != "ca" {
		t.Errorf("clientConfig %+v, want the HAMi URL and the CA", u)
	}

	if a := controllerArg(m, "--hami-pods"); a != "--hami-pods" {
		t.Errorf("controller arg %q, want --hami-pods", a)
	}
	if a := controllerArg(render(t, "featureGates.HAMiPods=true"), "--hami-pods"); a != "" {
		t.Errorf("the gate alone passes %q, want nothing", a)
	}

	role := m.get("ClusterRole", "gpudra-controller-hami-pods").(*rbacv1.ClusterRole)
	may := func(resource, verb string) bool {
		return slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
			return slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb)
		})
	}
	for _, rv := range [][2]string{{"resourceclaimtemplates", "create"}, {"mutatingwebhookconfigurations", "update"}} {
		if !may(rv[0], rv[1]) {
			t.Errorf("the controller may not %s %s", rv[1], rv[0])
		}
	}
	off := render(t, "featureGates.HAMiPods=true")
	if got := off.names("ClusterRole"); slices.Contains(got, "gpudra-controller-hami-pods") {
		t.Errorf("without webhook.hamiPods the chart renders ClusterRole gpudra-controller-hami-pods")
	}
	for _, r := range off.get("ClusterRole", "gpudra-controller").(*rbacv1.ClusterRole).Rules {
		if slices.Contains(r.Resources, "mutatingwebhookconfigurations") || slices.Contains(r.Resources, "resourceclaimtemplates") && slices.Contains(r.Verbs, "create") {
			t.Errorf("without webhook.hamiPods the controller may %v %v", r.Verbs, r.Resources)
		}
	}
}

// deployments/hami/hami-pods.yaml is what the chart renders for the HAMi pods' webhook.
func TestHAMiPodsPlainManifest(t *testing.T) {
	rendered := render(t, "webhook.hamiPods.enabled=true", "featureGates.HAMiPods=true")
	data, err := os.ReadFile(filepath.Join("..", "hami", "hami-pods.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := decodeManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(plain.objs) != 3 {
		t.Fatalf("%d objects, want the ClusterRole, its binding and the webhook configuration", len(plain.objs))
	}
	for _, p := range plain.objs {
		got := rendered.getIn(p.kind, p.namespace, p.name)
		if got == nil {
			t.Errorf("%s %s is not in the chart", p.kind, p.name)
			continue
		}
		got = withoutLabels(t, got)
		if want := withoutLabels(t, p.obj); !apiequality.Semantic.DeepEqual(got, want) {
			t.Errorf("%s %s differs between deployments/hami (-) and the chart (+):\n%s", p.kind, p.name, diff.Diff(want, got))
		}
	}
}

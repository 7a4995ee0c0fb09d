package helm_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/driver/miglayout"
)

func TestDefaultMIGLayouts(t *testing.T) {
	m := render(t)
	cm, ok := m.get("ConfigMap", "gpudra-mig-layouts").(*corev1.ConfigMap)
	if !ok {
		t.Fatal("no ConfigMap gpudra-mig-layouts by default")
	}
	f, err := miglayout.Parse([]byte(cm.Data["mig-layouts.yaml"]))
	if err != nil {
		t.Fatalf("the default MIG layouts do not parse: %v\n%s", err, cm.Data["mig-layouts.yaml"])
	}
	for _, name := range []string{"all-disabled", "all-enabled", "all-1g.10gb", "all-balanced"} {
		if _, err := f.Layout(name); err != nil {
			t.Error(err)
		}
	}
	h100 := miglayout.GPU{PCIDeviceID: 0x233010DE}
	balanced, _ := f.Layout("all-balanced")
	if e, ok := miglayout.Select(balanced, h100); !ok || !slices.Equal(e.Profiles(), []string{"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}) {
		t.Errorf("all-balanced on an H100: %v", e.Profiles())
	}
	spec := m.get("DaemonSet", "gpudra-kubelet-plugin").(*appsv1.DaemonSet).Spec.Template.Spec
	c := spec.Containers[0]
	if !slices.Contains(c.Args, "--mig-layouts=/etc/gpudra/mig-layouts.yaml") {
		t.Errorf("plugin args %v lack --mig-layouts", c.Args)
	}
	mounted := slices.ContainsFunc(c.VolumeMounts, func(v corev1.VolumeMount) bool {
		return v.Name == "mig-layouts" && v.MountPath == "/etc/gpudra" && v.ReadOnly
	})
	volume := slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == "mig-layouts" && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name
	})
	if !mounted || !volume {
		t.Errorf("the layouts ConfigMap is not mounted at /etc/gpudra: mounts %+v", c.VolumeMounts)
	}

	none := render(t, "kubeletPlugin.migLayouts=null")
	if got := none.names("ConfigMap"); len(got) > 0 {
		t.Errorf("kubeletPlugin.migLayouts=null renders ConfigMaps %v", got)
	}
	if args := none.get("DaemonSet", "gpudra-kubelet-plugin").(*appsv1.DaemonSet).Spec.Template.Spec.Containers[0].Args; slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--mig-layouts") }) {
		t.Errorf("kubeletPlugin.migLayouts=null: plugin args %v", args)
	}
}

// admitNodeUpdate evaluates a ValidatingAdmissionPolicy as the API server does for an
// update of Node old to obj by user on node.
func admitNodeUpdate(t *testing.T, policy *admissionv1.ValidatingAdmissionPolicy, old, obj *corev1.Node, username, node string) (bool, string) {
	t.Helper()
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		t.Fatal(err)
	}
	withAuthz := plugincel.OptionalVariableDeclarations{HasAuthorizer: true}
	var vars []plugincel.NamedExpressionAccessor
	for _, v := range policy.Spec.Variables {
		vars = append(vars, &validating.Variable{Name: v.Name, Expression: v.Expression})
	}
	compiler.CompileAndStoreVariables(vars, withAuthz, environment.StoredExpressions)
	var matches []plugincel.ExpressionAccessor
	for i := range policy.Spec.MatchConditions {
		matches = append(matches, (*matchconditions.MatchCondition)(&policy.Spec.MatchConditions[i]))
	}
	validations := make([]plugincel.ExpressionAccessor, len(policy.Spec.Validations))
	messages := make([]plugincel.ExpressionAccessor, len(policy.Spec.Validations))
	for i, v := range policy.Spec.Validations {
		validations[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			messages[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	validator := validating.NewValidator(
		compiler.CompileCondition(validations, withAuthz, environment.StoredExpressions),
		matchconditions.NewMatcher(compiler.CompileCondition(matches, withAuthz, environment.StoredExpressions), policy.Spec.FailurePolicy, "policy", "validate", policy.Name),
		compiler.CompileCondition(nil, withAuthz, environment.StoredExpressions),
		compiler.CompileCondition(messages, plugincel.OptionalVariableDeclarations{}, environment.StoredExpressions),
		policy.Spec.FailurePolicy, nil)
	gvk := schema.GroupVersionKind{Version: "v1", Kind: "Node"}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	who := &user.DefaultInfo{Name: username, Extra: map[string][]string{"authentication.kubernetes.io/node-name": {node}}}
	attrs := &admission.VersionedAttributes{
		Attributes:         admission.NewAttributesRecord(obj, old, gvk, "", obj.Name, gvr, "", admission.Update, nil, false, who),
		VersionedObject:    admission.NewLazyObject(obj),
		VersionedOldObject: admission.NewLazyObject(old),
		VersionedKind:      gvk,
	}
	res := validator.Validate(context.Background(), gvr, attrs, nil, nil, celconfig.RuntimeCELCostBudget, nil)
	for _, d := range res.Decisions {
		if d.Action == validating.ActionDeny {
			return false, d.Message
		}
	}
	return true, ""
}

func TestNodePolicyAllowsOnlyTheMIGLayoutState(t *testing.T) {
	const node = "gpu-node-1"
	policy := render(t).get("ValidatingAdmissionPolicy", "gpudra-node-mig-config-state").(*admissionv1.ValidatingAdmissionPolicy)
	if errs := compileErrors(t, policy); len(errs) > 0 {
		t.Fatalf("the API server would refuse the policy:\n%s", strings.Join(errs, "\n"))
	}
	old := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{api.LabelMIGConfig: "all-balanced", "kubernetes.io/hostname": node}}}
	with := func(name string, change func(*corev1.Node)) *corev1.Node {
		n := old.DeepCopy()
		n.Name = name
		change(n)
		return n
	}
	state := func(v string) func(*corev1.Node) {
		return func(n *corev1.Node) { n.Labels[api.LabelMIGConfigState] = v }
	}
	tests := []struct {
		name    string
		old     *corev1.Node
		obj     *corev1.Node
		node    string
		allowed bool
		want    string
	}{
		{"sets the state", old, with(node, state(api.MIGConfigPending)), node, true, ""},
		{"changes the state", with(node, state(api.MIGConfigPending)), with(node, state(api.MIGConfigSuccess)), node, true, ""},
		{"removes the state", with(node, state(api.MIGConfigFailed)), old, node, true, ""},
		{"another node", with("gpu-node-2", func(*corev1.Node) {}), with("gpu-node-2", state(api.MIGConfigSuccess)), node, false, "may not change Node gpu-node-2"},
		{"a state value of its own", old, with(node, state("done")), node, false, "pending, success or failed"},
		{"the layout label", old, with(node, func(n *corev1.Node) { n.Labels[api.LabelMIGConfig] = "all-1g.10gb" }), node, false, "may change only the label gpu.gpudra.dev/mig-config.state"},
		{"another label", old, with(node, func(n *corev1.Node) { n.Labels["team"] = "a" }), node, false, "may change only the label"},
		{"a label removed", old, with(node, func(n *corev1.Node) { delete(n.Labels, "kubernetes.io/hostname") }), node, false, "may change only the label"},
		{"a taint", old, with(node, func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}} }), node, false, "not its spec"},
		{"an annotation", old, with(node, func(n *corev1.Node) { n.Annotations = map[string]string{"a": "b"} }), node, false, "not its spec, annotations"},
		{"no node in the token", old, with(node, state(api.MIGConfigPending)), "", false, "token bound to its pod"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ok, msg := admitNodeUpdate(t, policy, tc.old, tc.obj, pluginUser, tc.node)
			if ok != tc.allowed || !strings.Contains(msg, tc.want) {
				t.Errorf("admitted %v (%q), want %v with %q", ok, msg, tc.allowed, tc.want)
			}
		})
	}
	if ok, _ := admitNodeUpdate(t, policy, old, with(node, func(n *corev1.Node) { n.Labels["team"] = "a" }), "system:serviceaccount:gpudra:someone-else", node); !ok {
		t.Error("the policy holds identities other than the plugin's")
	}
}

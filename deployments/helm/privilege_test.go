package helm_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/admission"
	k8scorev1 "k8s.io/kubernetes/pkg/apis/core/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	pinning "github.com/gpudra/gpudra/queueing/admission"
	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// controllerUser is the controller's identity.
const controllerUser = "system:serviceaccount:gpudra:gpudra-controller"

// pluginPolicies are the admission policies that hold a kubelet plugin's token to its node.
var pluginPolicies = []string{"gpudra-resourceslices-own-node", "gpudra-node-mig-config-state", "gpudra-mps-daemons-own-node", "gpudra-mps-daemon-pods"}

// TestPluginPoliciesNeedConsentToTurnOff: rbac.resourceSlicePolicy=false would leave a
// plugin's token free to write every node's ResourceSlices, patch any Node and run
// privileged pods anywhere; the chart refuses it unless rbac.acceptClusterWidePluginWrites
// says so.
func TestPluginPoliciesNeedConsentToTurnOff(t *testing.T) {
	out, err := template(t, []string{"rbac.resourceSlicePolicy=false"})
	if err == nil || !strings.Contains(out, "rbac.resourceSlicePolicy=false") || !strings.Contains(out, "rbac.acceptClusterWidePluginWrites=true") {
		t.Errorf("rbac.resourceSlicePolicy=false renders (err %v), want a refusal naming it and rbac.acceptClusterWidePluginWrites:\n%s", err, out)
	}
	for _, tc := range []struct {
		name         string
		sets         []string
		wantPolicies bool
	}{
		{"the defaults hold plugins to their node", nil, true},
		{"turned off with consent", []string{"rbac.resourceSlicePolicy=false", "rbac.acceptClusterWidePluginWrites=true"}, false},
		{"no RBAC, no policies for identities the chart does not make", []string{"rbac.create=false"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := render(t, tc.sets...)
			for _, name := range pluginPolicies {
				if got := m.get("ValidatingAdmissionPolicy", name) != nil && m.get("ValidatingAdmissionPolicyBinding", name) != nil; got != tc.wantPolicies {
					t.Errorf("policy %s and its binding rendered: %v, want %v", name, got, tc.wantPolicies)
				}
			}
		})
	}
}

// pinned is a pod of an admitted gang waiting at gpudra's gate, and the same pod as the
// controller's real pod pinner (queueing/admission.PodPinner) updates it.
func pinned(t *testing.T) (before, after *corev1.Pod) {
	t.Helper()
	before = &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "train-1", UID: "train-1-uid",
			Labels:          map[string]string{api.LabelWorkload: "wl-uid", "app": "train"},
			Annotations:     map[string]string{api.AnnotationPlacement: "r1-n1,r1-n2", "batch.kubernetes.io/job-completion-index": "1"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: "job-uid"}}},
		Spec: corev1.PodSpec{
			SchedulingGates: []corev1.PodSchedulingGate{{Name: api.SchedulingGate}, {Name: "other.example/gate"}},
			NodeSelector:    map[string]string{"nvidia.com/gpu.present": "true"},
			Containers:      []corev1.Container{{Name: "train", Image: "registry.example/train:1"}},
		},
	}
	k8scorev1.SetObjectDefaults_Pod(before)
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(before.DeepCopy()).Build()
	key := types.NamespacedName{Namespace: before.Namespace, Name: before.Name}
	if _, err := (&pinning.PodPinner{Client: c}).Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	after = &corev1.Pod{}
	if err := c.Get(context.Background(), key, after); err != nil {
		t.Fatal(err)
	}
	if after.Spec.NodeSelector[topology.LabelHostname] != "r1-n2" || slices.ContainsFunc(after.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == api.SchedulingGate }) {
		t.Fatalf("the pinner did not pin the pod: %+v", after.Spec)
	}
	return before, after
}

// TestControllerPodPolicy: the controller's one pod update, pinning a gated pod to its
// planned node, passes the chart's policy; any other change a stolen controller token
// could make to a pod is refused.
func TestControllerPodPolicy(t *testing.T) {
	m := render(t)
	policy := m.get("ValidatingAdmissionPolicy", "gpudra-controller-pod-pinning").(*admissionv1.ValidatingAdmissionPolicy)
	if b, ok := m.get("ValidatingAdmissionPolicyBinding", policy.Name).(*admissionv1.ValidatingAdmissionPolicyBinding); !ok || b.Spec.PolicyName != policy.Name ||
		!slices.Equal(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) {
		t.Errorf("binding %+v, want Deny for %s", b, policy.Name)
	}
	testControllerPodPolicy(t, policy)
}

// testControllerPodPolicy checks the controller's pod policy against its real pinning and
// the changes a stolen controller token could try.
func testControllerPodPolicy(t *testing.T, policy *admissionv1.ValidatingAdmissionPolicy) {
	t.Helper()
	if errs := compileErrors(t, policy); len(errs) > 0 {
		t.Fatalf("the API server would refuse the policy:\n%s", strings.Join(errs, "\n"))
	}
	before, after := pinned(t)
	update := func(old, obj *corev1.Pod, user string) (bool, string) {
		return review(t, policy, request{op: admission.Update, obj: obj, old: old, username: user,
			gvk: schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, gvr: schema.GroupVersionResource{Version: "v1", Resource: "pods"}})
	}
	if ok, msg := update(before, after, controllerUser); !ok {
		t.Fatalf("the controller's pinning is refused: %s", msg)
	}
	if ok, _ := update(before, before, "system:serviceaccount:team-a:default"); !ok {
		t.Error("the policy holds identities other than the controller's")
	}
	const (
		gated    = "may update only pods that wait at the scheduling gate gpudra.dev/placement"
		gates    = "removes the scheduling gate gpudra.dev/placement of a pod (spec.schedulingGates) and no other"
		selector = "sets only the node selector kubernetes.io/hostname of a pod (spec.nodeSelector), to one of its planned nodes (r1-n1, r1-n2)"
		labels   = "adds only the label gpudra.dev/pinned-slot"
		spec     = "changes only spec.schedulingGates and spec.nodeSelector of a pod, not "
		meta     = "does not change a pod's annotations, owners or finalizers"
	)
	for _, tc := range []struct {
		name   string
		change func(old, obj *corev1.Pod)
		want   string
	}{
		{"a pod not waiting at gpudra's gate", func(old, obj *corev1.Pod) {
			old.Spec.SchedulingGates = old.Spec.SchedulingGates[1:]
		}, gated},
		{"a pod without planned nodes", func(old, obj *corev1.Pod) {
			delete(old.Annotations, api.AnnotationPlacement)
			delete(obj.Annotations, api.AnnotationPlacement)
		}, gated},
		{"a new image", func(old, obj *corev1.Pod) { obj.Spec.Containers[0].Image = "registry.example/miner:1" }, spec + "containers"},
		{"an image alone, the gate kept", func(old, obj *corev1.Pod) {
			*obj = *old.DeepCopy()
			obj.Spec.Containers[0].Image = "registry.example/miner:1"
		}, gates},
		{"a toleration added", func(old, obj *corev1.Pod) {
			obj.Spec.Tolerations = append(obj.Spec.Tolerations, corev1.Toleration{Operator: corev1.TolerationOpExists})
		}, spec + "tolerations"},
		{"an affinity set", func(old, obj *corev1.Pod) {
			obj.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "x", Operator: corev1.NodeSelectorOpExists}}}}}}}
		}, spec + "affinity"},
		{"an active deadline", func(old, obj *corev1.Pod) { obj.Spec.ActiveDeadlineSeconds = ptr.To[int64](1) }, spec + "activeDeadlineSeconds"},
		{"another gate lifted", func(old, obj *corev1.Pod) { obj.Spec.SchedulingGates = nil }, gates},
		{"a gate added", func(old, obj *corev1.Pod) {
			obj.Spec.SchedulingGates = append(obj.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: "hold.example/x"})
		}, gates},
		{"a node not planned", func(old, obj *corev1.Pod) {
			obj.Spec.NodeSelector[topology.LabelHostname] = "control-plane-1"
		}, selector + ", not control-plane-1"},
		{"no node", func(old, obj *corev1.Pod) { delete(obj.Spec.NodeSelector, topology.LabelHostname) }, selector + ", not <none>"},
		{"another node selector", func(old, obj *corev1.Pod) { obj.Spec.NodeSelector["node-role.kubernetes.io/control-plane"] = "" }, selector},
		{"a node selector removed", func(old, obj *corev1.Pod) { delete(obj.Spec.NodeSelector, "nvidia.com/gpu.present") }, selector},
		{"a slot of another node", func(old, obj *corev1.Pod) { obj.Labels[api.LabelPinnedSlot] = "0" }, labels},
		{"a slot outside the plan", func(old, obj *corev1.Pod) { obj.Labels[api.LabelPinnedSlot] = "7" }, labels},
		{"a slot that is not a number", func(old, obj *corev1.Pod) { obj.Labels[api.LabelPinnedSlot] = "one" }, labels},
		{"another label changed", func(old, obj *corev1.Pod) { obj.Labels["app"] = "miner" }, labels},
		{"a label removed", func(old, obj *corev1.Pod) { delete(obj.Labels, api.LabelWorkload) }, labels},
		{"an annotation added", func(old, obj *corev1.Pod) { obj.Annotations["example.com/x"] = "y" }, meta},
		{"the plan rewritten", func(old, obj *corev1.Pod) { obj.Annotations[api.AnnotationPlacement] = "r1-n2,r1-n2" }, meta},
		{"the owner dropped", func(old, obj *corev1.Pod) { obj.OwnerReferences = nil }, meta},
		{"a finalizer added", func(old, obj *corev1.Pod) { obj.Finalizers = []string{"example.com/keep"} }, meta},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, obj := before.DeepCopy(), after.DeepCopy()
			tc.change(old, obj)
			if ok, msg := update(old, obj, controllerUser); ok || !strings.Contains(msg, tc.want) {
				t.Errorf("admitted %v (%q), want refused saying %q", ok, msg, tc.want)
			}
		})
	}
}

//go:build e2e

package e2e

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/lab"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// TestRealNodeSharePriorityFromThePodsPriorityClass: with --share-priority-threshold=1000 on
// the real node's plugin (the chart's kubeletPlugin.sharePriorityThreshold), two shares whose
// configs leave priority unset take their pods': the pod of a 1000 PriorityClass is High, the
// pod without a class Low, and each container gets the variables of that priority.
func TestRealNodeSharePriorityFromThePodsPriorityClass(t *testing.T) {
	inLane(t, realNodeLane)
	node := realNode(t)
	ctx := t.Context()
	dsNS, _, ok := state.RealNodePluginDaemonSet(node)
	if !ok {
		labLacks(t, "the real node's plugin as the chart's DaemonSet (install: chart), whose flags the test changes")
	}
	// What the chart grants with the threshold set: get on pods.
	grantPluginPodReads(t, dsNS)
	class := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "e2e-inference-critical"}, Value: 1000}
	if _, err := client.SchedulingV1().PriorityClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.SchedulingV1().PriorityClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{})
	})
	restoreRealNodePluginAtEnd(t, node)
	if err := updateRealNodePlugin(t, ctx, node, "--share-priority-threshold=1000", func(s *corev1.PodSpec) {
		setArg(&s.Containers[0], "share-priority-threshold", "1000")
	}); err != nil {
		t.Fatal(err)
	}
	vgpu, _ := flagValue(realNodePluginArgs(t, node), "vgpu-library")

	ns := namespace(t, "share-priority")
	for _, name := range []string{"inference", "batch"} {
		c := claimOf(ns, name, api.DeviceClassShare, map[string]string{"memory": "4Gi", "compute": "20"}, "")
		if _, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := lab.RealNodePod(ns, name, node, []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(name)}})
		if name == "inference" {
			p.Spec.PriorityClassName = class.Name
		}
		if _, err := client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]map[string]string{
		"inference": {"GPUDRA_SHARE_PRIORITY_0": "High", "GPUDRA_SHARE_POLICY_0": "Fixed"},
		"batch":     {"GPUDRA_SHARE_PRIORITY_0": "Low", "GPUDRA_SHARE_POLICY_0": "Fixed"},
	}
	if vgpu != "" {
		want["inference"]["CUDA_TASK_PRIORITY"], want["batch"]["CUDA_TASK_PRIORITY"] = "0", "1"
	} else {
		want["inference"]["CUDA_MPS_CLIENT_PRIORITY"], want["batch"]["CUDA_MPS_CLIENT_PRIORITY"] = "0", "1"
	}
	for name, w := range want {
		r := probeOutput(t, ns, name)
		for k, v := range w {
			if got, ok := r.env[k]; !ok || got != v {
				t.Errorf("pod %s: %s=%q in the container (set %v), want %q", name, k, got, ok, v)
			}
		}
	}
}

// grantPluginPodReads gives the plugins' ServiceAccount (in namespace ns) get on pods, as the
// chart does with kubeletPlugin.sharePriorityThreshold or vgpuLibrary set, until the test ends.
func grantPluginPodReads(t *testing.T, ns string) {
	t.Helper()
	ctx := t.Context()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-plugin-reads-pods"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-plugin-reads-pods"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "gpudra-kubelet-plugin", Namespace: ns}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}}
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
}

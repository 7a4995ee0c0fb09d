package helm_test

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// readsPods is whether the plugin's ClusterRole lets it get pods.
func readsPods(m manifest) bool {
	r := m.get("ClusterRole", "gpudra-kubelet-plugin").(*rbacv1.ClusterRole)
	for _, rule := range r.Rules {
		if slices.Contains(rule.APIGroups, "") && slices.Contains(rule.Resources, "pods") {
			return true
		}
	}
	return false
}

func pluginArg(ds *appsv1.DaemonSet, prefix string) string {
	for _, a := range ds.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, prefix) {
			return a
		}
	}
	return ""
}

// A share's priority follows its pods' PriorityClass only when a threshold is set, and only
// then may the plugin read pods; a pool may set its own.
func TestSharePriorityThresholdIsOptIn(t *testing.T) {
	m := render(t)
	if a := pluginArg(m.get("DaemonSet", "gpudra-kubelet-plugin").(*appsv1.DaemonSet), "--share-priority-threshold"); a != "" || readsPods(m) {
		t.Errorf("default: plugin arg %q, reads pods %v; want neither", a, readsPods(m))
	}
	m = render(t, "featureGates.SharePriorityFromPods=true", "kubeletPlugin.sharePriorityThreshold=1000")
	if a := pluginArg(m.get("DaemonSet", "gpudra-kubelet-plugin").(*appsv1.DaemonSet), "--share-priority-threshold"); a != "--share-priority-threshold=1000" || !readsPods(m) {
		t.Errorf("sharePriorityThreshold=1000: plugin arg %q, reads pods %v; want --share-priority-threshold=1000 and get on pods", a, readsPods(m))
	}
	m = render(t, "featureGates.SharePriorityFromPods=true", `kubeletPlugin.pools=[{"name":"inference","sharePriorityThreshold":0}]`)
	if a := pluginArg(m.get("DaemonSet", "gpudra-kubelet-plugin-inference").(*appsv1.DaemonSet), "--share-priority-threshold"); a != "--share-priority-threshold=0" || !readsPods(m) {
		t.Errorf("a pool's threshold 0: plugin arg %q, reads pods %v", a, readsPods(m))
	}
	if a := pluginArg(m.get("DaemonSet", "gpudra-kubelet-plugin").(*appsv1.DaemonSet), "--share-priority-threshold"); a != "" {
		t.Errorf("the default pool took the inference pool's threshold: %q", a)
	}
	// HAMi-core numbers a container's caps across its claims, from the claim's pods.
	if m := render(t, "featureGates.HAMiCoreEnforcement=true", "kubeletPlugin.vgpuLibrary=/usr/local/vgpu/libvgpu.so"); !readsPods(m) {
		t.Error("vgpuLibrary set: the plugin may not read the pods of its HAMi-core claims")
	}
	if m := render(t, "featureGates.HAMiCoreEnforcement=true", `kubeletPlugin.pools=[{"name":"hami","vgpuLibrary":"/usr/local/vgpu/libvgpu.so"}]`); !readsPods(m) {
		t.Error("a pool's vgpuLibrary: the plugin may not read the pods of its HAMi-core claims")
	}
	for set, want := range map[string]string{
		"kubeletPlugin.sharePriorityThreshold=high": "kubeletPlugin.sharePriorityThreshold=high: want an integer",
		"kubeletPlugin.sharePriorityThreshold=1.5":  "kubeletPlugin.sharePriorityThreshold=1.5: want an integer",
	} {
		if out, err := template(t, []string{set}); err == nil || !strings.Contains(out, want) {
			t.Errorf("--set %s: err %v, output should say %q:\n%s", set, err, want, out)
		}
	}
}

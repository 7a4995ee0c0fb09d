package helm_test

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// The plugin sees the node's processes and the kubelet's pod-resources socket only when
// shareUsage asks for it.
func TestShareUsageIsOptIn(t *testing.T) {
	for _, tc := range []struct {
		sets []string
		want bool
	}{
		{nil, false},
		{[]string{"kubeletPlugin.shareUsage=true"}, true},
	} {
		ds := render(t, tc.sets...).get("DaemonSet", "gpudra-kubelet-plugin").(*appsv1.DaemonSet)
		spec := ds.Spec.Template.Spec
		mounted := false
		for _, c := range spec.Containers {
			for _, m := range c.VolumeMounts {
				if m.MountPath == "/var/lib/kubelet/pod-resources" {
					mounted = true
					if !m.ReadOnly {
						t.Errorf("%v: the pod-resources socket's folder is mounted writable", tc.sets)
					}
				}
			}
		}
		if spec.HostPID != tc.want || mounted != tc.want {
			t.Errorf("%v: hostPID %v, pod-resources mounted %v; want both %v", tc.sets, spec.HostPID, mounted, tc.want)
		}
	}
	// A kubelet with another root directory: the host folder follows the value, the plugin
	// still finds the socket where it looks by default.
	ds := render(t, "kubeletPlugin.shareUsage=true", "kubeletPlugin.kubeletPodResourcesDir=/data/kubelet/pod-resources").get("DaemonSet", "gpudra-kubelet-plugin").(*appsv1.DaemonSet)
	found := false
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == "pod-resources" {
			found = v.HostPath != nil && v.HostPath.Path == "/data/kubelet/pod-resources"
		}
	}
	if !found {
		t.Errorf("kubeletPodResourcesDir=/data/kubelet/pod-resources: volumes %+v", ds.Spec.Template.Spec.Volumes)
	}
}

package lab

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestChartPodsGetTheirConfigMaps: a chart pod the lab runs as a process reads the files of
// the ConfigMaps its container mounts (the MIG layouts) from the lab's folder, under the
// flags that name them; other flags and volumes are left as they are.
func TestChartPodsGetTheirConfigMaps(t *testing.T) {
	cs := fake.NewClientset(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "gpudra", Name: "gpudra-mig-layouts"},
		Data:       map[string]string{"mig-layouts.yaml": "version: v1\n"},
	})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "gpudra", Name: "plugin-x"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "plugin", VolumeMounts: []corev1.VolumeMount{
				{Name: "mig-layouts", MountPath: "/etc/gpudra/", ReadOnly: true},
				{Name: "driver-root", MountPath: "/driver-root"},
			}}},
			Volumes: []corev1.Volume{
				{Name: "mig-layouts", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gpudra-mig-layouts"}}}},
				{Name: "driver-root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}},
			},
		},
	}
	dir := t.TempDir()
	mounts, err := configMapMounts(t.Context(), cs, pod, dir)
	if err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(dir, "volumes", "mig-layouts")
	if want := map[string]string{"/etc/gpudra": local}; !reflect.DeepEqual(mounts, want) {
		t.Fatalf("mounts = %v, want %v", mounts, want)
	}
	if data, err := os.ReadFile(filepath.Join(local, "mig-layouts.yaml")); err != nil || string(data) != "version: v1\n" {
		t.Fatalf("the ConfigMap's file: %q, %v", data, err)
	}
	argv := []string{"/bin/gpudra-kubelet-plugin", "--mig-layouts=/etc/gpudra/mig-layouts.yaml", "--driver-root=/driver-root",
		"--other=/etc/gpudra-other/x", "--mig=static", "--dir=/etc/gpudra"}
	got := inMounts(argv, mounts)
	want := []string{"/bin/gpudra-kubelet-plugin", "--mig-layouts=" + filepath.Join(local, "mig-layouts.yaml"), "--driver-root=/driver-root",
		"--other=/etc/gpudra-other/x", "--mig=static", "--dir=" + local}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("argv = %q\nwant %q", got, want)
	}
}

// TestConfigMapMountsStayInTheirFolder: a ConfigMap item whose path leaves the volume is refused.
func TestConfigMapMountsStayInTheirFolder(t *testing.T) {
	cs := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm"}, Data: map[string]string{"k": "x"}})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/etc/x"}}}},
			Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}, Items: []corev1.KeyToPath{{Key: "k", Path: "../escape"}}}}}},
		},
	}
	if _, err := configMapMounts(t.Context(), cs, pod, t.TempDir()); err == nil {
		t.Fatal("an item path outside the volume was written")
	}
}

package lab

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func TestChartValuesOnePoolPerProfile(t *testing.T) {
	u := &upper{file: &File{Kueue: KueueSpec{Enabled: true}}, ports: map[string]int{"controller-webhook": 9443},
		state: &State{Nodes: []Node{
			{Name: "a", Profile: "dgx-h100", MIG: "dynamic"}, {Name: "b", Profile: "dgx-h100", MIG: "dynamic"},
			{Name: "c", Profile: "l40s-pcie"}, {Name: "r", Profile: "dgx-a100", Real: true},
		}}}
	data, err := u.chartValues()
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		KubeletPlugin struct {
			DefaultPool bool `json:"defaultPool"`
			Pools       []struct {
				Name, NVML, MIG string
				NodeSelector    map[string]string `json:"nodeSelector"`
			} `json:"pools"`
		} `json:"kubeletPlugin"`
		Webhook struct{ URL string } `json:"webhook"`
	}
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	if v.KubeletPlugin.DefaultPool || len(v.KubeletPlugin.Pools) != 2 {
		t.Fatalf("pools %+v (default pool %v); want one per kwok profile and no default pool", v.KubeletPlugin.Pools, v.KubeletPlugin.DefaultPool)
	}
	h100 := v.KubeletPlugin.Pools[0]
	if h100.Name != "dgx-h100" || h100.NVML != "sim:dgx-h100" || h100.MIG != "dynamic" || h100.NodeSelector[LabelProfile] != "dgx-h100" {
		t.Errorf("first pool %+v", h100)
	}
	if v.Webhook.URL != "https://127.0.0.1:9443/validate-gpudra-config" {
		t.Errorf("webhook url %q", v.Webhook.URL)
	}

	u.state.Nodes = append(u.state.Nodes, Node{Name: "d", Profile: "dgx-h100", MIG: "none"})
	if _, err := u.chartValues(); err == nil || !strings.Contains(err.Error(), "profile dgx-h100") {
		t.Fatalf("two MIG strategies for one profile: %v", err)
	}
}

func TestEnvValueResolvesFieldReferences(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "n1"}}
	pod.UID = "u-1"
	got, err := envValue(pod, corev1.EnvVar{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}})
	if err != nil || got != "n1" {
		t.Fatalf("spec.nodeName = %q, %v", got, err)
	}
	if _, err := envValue(pod, corev1.EnvVar{Name: "X", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}); err == nil {
		t.Fatal("status.podIP resolved; the lab cannot know it")
	}
}

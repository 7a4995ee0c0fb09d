package lab

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func TestChartValuesOnePoolPerProfile(t *testing.T) {
	u := &upper{file: &File{Kueue: KueueSpec{Enabled: true}}, ports: map[string]int{"controller-webhook": 9443, "metrics-r": 9500},
		layout: Layout{Root: "/lab"}, tc: &Toolchain{CDIHook: "/tc/nvidia-cdi-hook"},
		state: &State{Server: "https://127.0.0.1:6443", Nodes: []Node{
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
				Name, NVML, MIG                                                     string
				NodeSelector                                                        map[string]string `json:"nodeSelector"`
				Tolerations                                                         []corev1.Toleration
				HostNetwork                                                         bool `json:"hostNetwork"`
				MetricsPort                                                         int  `json:"metricsPort"`
				MetricsHost, DriverRoot, PluginDataDir, KubeletRegistryDir, CDIRoot string
				NvidiaCDIHook                                                       string `json:"nvidiaCDIHook"`
				MetricsSecure                                                       *bool  `json:"metricsSecure"`
			} `json:"pools"`
		} `json:"kubeletPlugin"`
		KubernetesService struct{ Host, Port string } `json:"kubernetesService"`
		Webhook           struct{ URL string }        `json:"webhook"`
	}
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	if v.KubeletPlugin.DefaultPool || len(v.KubeletPlugin.Pools) != 3 {
		t.Fatalf("pools %+v (default pool %v); want one per kwok profile, one per real node and no default pool", v.KubeletPlugin.Pools, v.KubeletPlugin.DefaultPool)
	}
	// The real node's kubelet runs its pool's pod: in the host's network (no kube-proxy: the
	// API server at kubernetesService), with the node's folders and the toolchain's hook.
	real := v.KubeletPlugin.Pools[2]
	if real.Name != "r" || real.NVML != "sim:dgx-a100" || real.NodeSelector[LabelHostname] != "r" || len(real.NodeSelector) != 1 ||
		len(real.Tolerations) != 1 || real.Tolerations[0].Key != RealNodeTaint || !real.HostNetwork ||
		real.MetricsHost != "127.0.0.1" || real.MetricsPort != 9500 || real.DriverRoot != "/lab/nodes/r/driver-root" ||
		real.PluginDataDir != "/lab/nodes/r/plugin" || real.KubeletRegistryDir != "/lab/nodes/r/kubelet/root/plugins_registry" ||
		real.CDIRoot != "/lab/nodes/r/cdi" || real.NvidiaCDIHook != "/tc/nvidia-cdi-hook" || real.MetricsSecure == nil || *real.MetricsSecure {
		t.Errorf("real node's pool %+v", real)
	}
	if v.KubernetesService.Host != "127.0.0.1" || v.KubernetesService.Port != "6443" {
		t.Errorf("kubernetesService %+v, want the lab's API server 127.0.0.1:6443", v.KubernetesService)
	}
	h100 := v.KubeletPlugin.Pools[0]
	if h100.Name != "dgx-h100" || h100.NVML != "sim:dgx-h100" || h100.MIG != "dynamic" || h100.NodeSelector[LabelProfile] != "dgx-h100" {
		t.Errorf("first pool %+v", h100)
	}
	if v.Webhook.URL != "https://localhost:9443/validate-gpudra-config" {
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

package fragmentation

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	fwk "k8s.io/kube-scheduler/framework"

	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"

	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/topology/placement"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// TestShippedConfiguration loads deployments/scheduler/scheduler-config.yaml the way
// kube-scheduler does, validates it, and builds the plugin from each profile's args.
// shippedConfig is the shipped scheduler configuration as kube-scheduler loads it, defaults
// applied.
func shippedConfig(t testing.TB) *schedconfig.KubeSchedulerConfiguration {
	logger, _ := ktesting.NewTestContext(t)
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, deployments.SchedulerConfiguration, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := options.LoadConfigFromFile(logger, path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestShippedConfiguration(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	cfg := shippedConfig(t)
	if err := validation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		t.Fatal(err)
	}
	l := newLab(t, []placement.NodeSpec{{Name: "n", CPU: 8000, Memory: 8192, GPUs: 1, Model: "T4"}})
	tieBreaks := map[string]string{}
	for _, prof := range cfg.Profiles {
		found := false
		for _, pc := range prof.PluginConfig {
			if pc.Name != Name {
				continue
			}
			found = true
			p, err := New(ctx, pc.Args, handle{dra: l.dra})
			if err != nil {
				t.Fatalf("profile %s: %v", prof.SchedulerName, err)
			}
			tieBreaks[prof.SchedulerName] = p.(*Plugin).tieBreak
		}
		if !found {
			t.Errorf("profile %s has no %s args", prof.SchedulerName, Name)
		}
		enabled := false
		for _, pl := range append(prof.Plugins.Score.Enabled, prof.Plugins.MultiPoint.Enabled...) {
			enabled = enabled || pl.Name == Name
		}
		if !enabled {
			t.Errorf("profile %s does not score with %s: %+v", prof.SchedulerName, Name, prof.Plugins.Score.Enabled)
		}
	}
	if tieBreaks["gpudra-fragmentation"] != TieBreakNodeName || tieBreaks["default-scheduler"] != "" {
		t.Errorf("tie-breaks by profile = %v, want NodeName for gpudra-fragmentation and the default for default-scheduler", tieBreaks)
	}
}

func TestArgsRefusedWithTheField(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  TypicalPod
		tie  string
		want string
	}{
		{"unknown tie-break", TypicalPod{GPUs: 1, GPUMilli: 1000, Count: 1}, "Spread", `tieBreak "Spread": accepted values are Random, NodeName`},
		{"share above a GPU", TypicalPod{GPUs: 1, GPUMilli: 1500, Count: 1}, "", "typicalPods[0].gpuMilli 1500: accepted values are 1 to 1000"},
		{"part of several GPUs", TypicalPod{GPUs: 2, GPUMilli: 500, Count: 1}, "", "typicalPods[0].gpuMilli 500: a pod with 2 GPUs takes them whole (1000)"},
		{"CPU pod with a share", TypicalPod{GPUMilli: 500, Count: 1}, "", "typicalPods[0].gpuMilli 500: a CPU-only pod (gpus 0) takes no GPU share"},
		{"no count", TypicalPod{GPUs: 1, GPUMilli: 1000}, "", "typicalPods[0].count 0: must be at least 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := Args{TieBreak: tc.tie, TypicalPods: []TypicalPod{tc.pod}}
			if err := a.Validate(); err == nil || err.Error() != tc.want {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
	if err := (&Args{}).Validate(); err == nil {
		t.Fatal("args without typical pods were accepted")
	}
}

// TestSignPod: a pod is signed by its CPU and memory when its score depends on nothing
// else, and not signed when it asks for devices, by a claim or by an extended resource a
// DeviceClass backs (as DynamicResources and NodeResourcesFit refuse them).
func TestSignPod(t *testing.T) {
	l := newLab(t, nil)
	p := newPlugin(t, l, replayArgs)
	pod := func(cpu string, claim bool, extended ...corev1.ResourceName) *corev1.Pod {
		req := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("1Gi")}
		for _, name := range extended {
			req[name] = resource.MustParse("1")
		}
		pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: req, Limits: req}}}}}
		if claim {
			name := "gpu"
			pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &name}}
		}
		return pod
	}
	for name, pod := range map[string]*corev1.Pod{
		"a claim":                              pod("1", true),
		"a class's implicit extended resource": pod("1", false, corev1.ResourceName(resourceapi.ResourceDeviceClassPrefix+api.DeviceClassGPU)),
		"a class's explicit extended resource": pod("1", false, "gpudra.dev/nvlink-group-4"),
	} {
		if _, st := p.SignPod(t.Context(), pod); st.Code() != fwk.Unschedulable {
			t.Errorf("a pod with %s was signable: %v", name, st)
		}
	}
	a, st := p.SignPod(t.Context(), pod("1", false))
	b, _ := p.SignPod(t.Context(), pod("1000m", false))
	c, _ := p.SignPod(t.Context(), pod("2", false))
	if !st.IsSuccess() || !reflect.DeepEqual(a, b) || reflect.DeepEqual(a, c) {
		t.Fatalf("signatures: 1 CPU %v, 1000m %v, 2 CPUs %v (%v); want equal requests to sign alike and others not", a, b, c, st)
	}
	if d, st := p.SignPod(t.Context(), pod("1", false, "example.com/fpga")); !st.IsSuccess() || !reflect.DeepEqual(a, d) {
		t.Fatalf("a pod with a plain extended resource signs %v (%v), want %v as without it", d, st, a)
	}
}

package fragmentation

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	fwk "k8s.io/kube-scheduler/framework"

	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"

	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/topology/placement"
)

// TestShippedConfiguration loads deployments/scheduler/scheduler-config.yaml the way
// kube-scheduler does, validates it, and builds the plugin from each profile's args.
func TestShippedConfiguration(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, deployments.SchedulerConfiguration, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := options.LoadConfigFromFile(logger, path)
	if err != nil {
		t.Fatal(err)
	}
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

func TestSignPod(t *testing.T) {
	p := &Plugin{}
	pod := func(cpu string, claim bool) *corev1.Pod {
		pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("1Gi")}}}}}}
		if claim {
			name := "gpu"
			pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &name}}
		}
		return pod
	}
	if _, st := p.SignPod(t.Context(), pod("1", true)); st.Code() != fwk.Unschedulable {
		t.Fatalf("a pod with a claim was signable: %v", st)
	}
	a, st := p.SignPod(t.Context(), pod("1", false))
	b, _ := p.SignPod(t.Context(), pod("1000m", false))
	c, _ := p.SignPod(t.Context(), pod("2", false))
	if !st.IsSuccess() || !reflect.DeepEqual(a, b) || reflect.DeepEqual(a, c) {
		t.Fatalf("signatures: 1 CPU %v, 1000m %v, 2 CPUs %v (%v); want equal requests to sign alike and others not", a, b, c, st)
	}
}

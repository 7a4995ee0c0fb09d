package convert

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	sigsyaml "sigs.k8s.io/yaml"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver/allocation"
)

// The claims converted from HAMi pods select the cards HAMi would have given them: card
// types and UUIDs by annotation, shares of distinct GPUs with the memory and compute asked.
func TestHAMiClaimsSelectTheRightDevices(t *testing.T) {
	_, res := goldenCase{input: "hami-shares"}.run(t)
	templates := map[string]resourceapi.ResourceClaimSpec{}
	for _, d := range splitDocs(t, res.Output) {
		if spec, ok := claimSpec(t, d); ok {
			templates[d.name()] = spec
		}
	}
	classes, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	nodes := simNodes(t)
	type want struct {
		devices  map[string][]string // node → devices allocated; a node missing: none fits there
		memory   string              // each device's consumed memory ("" for whole GPUs)
		compute  string
		distinct bool
	}
	tests := []struct {
		name, template string
		want           want
	}{
		{"a 4000 MiB, 30 % vGPU is a share consuming exactly that", "team-a/notebook-gpus",
			want{devices: map[string][]string{"node-dgx-a100": {"gpu-0-share"}, "node-dgx-h100": {"gpu-0-share"}}, memory: "4000Mi", compute: "30"}},
		{"two 8 GiB vGPUs of an A100 or V100 are shares of two A100s, and none on H100s", "team-a/inference-gpus",
			want{devices: map[string][]string{"node-dgx-a100": {"gpu-0-share", "gpu-1-share"}}, memory: "8Gi", distinct: true}},
		{"nouse-gputype A100 keeps the GPU off A100s", "team-a/train-gpus",
			want{devices: map[string][]string{"node-dgx-h100": {"gpu-0"}}}},
		{"use-gpuuuid less nouse-gpuuuid leaves the one GPU listed in the first only", "team-a/pinned-gpus",
			want{devices: map[string][]string{"node-dgx-a100": {"gpu-1"}}}},
		{"gpucores alone is a whole GPU", "team-a/capped-gpus",
			want{devices: map[string][]string{"node-dgx-a100": {"gpu-0"}, "node-dgx-h100": {"gpu-0"}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec, ok := templates["ResourceClaimTemplate "+tc.template]
			if !ok {
				t.Fatalf("no ResourceClaimTemplate %s in the output", tc.template)
			}
			for _, n := range nodes {
				claim := &resourceapi.ResourceClaim{Spec: *spec.DeepCopy()}
				claim.Name, claim.Namespace, claim.UID = "c", "team-a", types.UID("uid-c")
				results, err := allocation.New(classes, n.slices).Allocate(context.Background(), n.name, claim)
				wantDevs, fits := tc.want.devices[n.name]
				if !fits {
					if err == nil {
						t.Errorf("%s: allocated %v, want none", n.name, results[0].Devices.Results)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: %v, want %v", n.name, err, wantDevs)
					continue
				}
				var got []string
				for _, d := range results[0].Devices.Results {
					got = append(got, d.Device)
					for capName, want := range map[resourceapi.QualifiedName]string{api.CapMemory: tc.want.memory, api.CapCompute: tc.want.compute} {
						q, ok := d.ConsumedCapacity[capName]
						if want == "" {
							continue
						}
						if !ok || q.Cmp(resource.MustParse(want)) != 0 {
							t.Errorf("%s: %s consumed %s %v, want %s", n.name, d.Device, capName, d.ConsumedCapacity, want)
						}
					}
				}
				slices.Sort(got)
				if !slices.Equal(got, wantDevs) {
					t.Errorf("%s: allocated %v, want %v", n.name, got, wantDevs)
				}
			}
		})
	}
}

// A share's vGPUs land on different GPUs even when one GPU has room for all of them, as
// HAMi puts each vGPU of a container on a card of its own.
func TestHAMiVGPUsLandOnDistinctGPUs(t *testing.T) {
	in := "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\nspec:\n  containers:\n  - name: a\n    resources:\n      limits: {nvidia.com/gpu: 4, nvidia.com/gpumem: 1024}\n"
	res, err := Convert([]byte(in), Options{Classes: goldenClasses()})
	if err != nil {
		t.Fatal(err)
	}
	var spec resourceapi.ResourceClaimSpec
	for _, d := range splitDocs(t, res.Output) {
		if s, ok := claimSpec(t, d); ok {
			spec = s
		}
	}
	classes, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	n := simNodes(t)[0]
	claim := &resourceapi.ResourceClaim{Spec: spec}
	claim.Name, claim.Namespace, claim.UID = "c", "ns", types.UID("uid-c")
	results, err := allocation.New(classes, n.slices).Allocate(context.Background(), n.name, claim)
	if err != nil {
		t.Fatalf("%v\n%s", err, res.Output)
	}
	gpus := map[string]bool{}
	for _, d := range results[0].Devices.Results {
		gpus[d.Device] = true
	}
	if len(gpus) != 4 {
		t.Errorf("4 vGPUs on %d GPUs %v, want 4", len(gpus), gpus)
	}
}

// Values HAMi would refuse, or that gpudra cannot carry over, are errors that name the
// field and the accepted values; the pod is left as it was.
func TestHAMiBadValuesNameTheFieldAndTheRange(t *testing.T) {
	tests := []struct {
		name      string
		resources string
		ann       string
		wantPath  string
		wantMsg   string
	}{
		{"gpucores above 100", "nvidia.com/gpu: 1, nvidia.com/gpumem: 1024, nvidia.com/gpucores: 150", "", "limits[nvidia.com/gpucores]", "from 0 to 100"},
		{"gpucores negative", "nvidia.com/gpumem: 1024, nvidia.com/gpucores: -1", "", "limits[nvidia.com/gpucores]", "from 0 to 100"},
		{"gpumem not a number", "nvidia.com/gpu: 1, nvidia.com/gpumem: abc", "", "limits[nvidia.com/gpumem]", "whole number of MiB from 1 to 1048576"},
		{"gpumem zero", "nvidia.com/gpumem: 0", "", "limits[nvidia.com/gpumem]", "whole number of MiB from 1 to 1048576"},
		{"gpumem a fraction", "nvidia.com/gpumem: 1.5", "", "limits[nvidia.com/gpumem]", "whole number of MiB"},
		{"gpumem-percentage above 100", "nvidia.com/gpumem-percentage: 101", "", "limits[nvidia.com/gpumem-percentage]", "from 1 to 100"},
		{"gpumem-percentage below 100", "nvidia.com/gpumem-percentage: 50", "", "limits[nvidia.com/gpumem-percentage]", "in MiB with nvidia.com/gpumem"},
		{"memory both ways", "nvidia.com/gpumem: 1024, nvidia.com/gpumem-percentage: 50", "", "limits[nvidia.com/gpumem-percentage]", "one way"},
		{"a priority other than 0 or 1", "nvidia.com/gpumem: 1024, nvidia.com/priority: 2", "", "limits[nvidia.com/priority]", "0 (high) or 1 (low)"},
		{"too many GPUs", "nvidia.com/gpu: 33, nvidia.com/gpumem: 1024", "", "limits[nvidia.com/gpu]", "from 1 to 32"},
		{"a resource not carried over", "nvidia.com/gpu: 1, nvidia.com/gpumem: 1024, nvidia.com/mig-1g.5gb: 1", "", "limits[nvidia.com/mig-1g.5gb]", "not a resource gpudra carries over"},
		{"an empty card type", "nvidia.com/gpu: 1", "nvidia.com/use-gputype: ''", "annotations[nvidia.com/use-gputype]", "comma-separated list of card types"},
		{"a quote in a card type", "nvidia.com/gpu: 1", `nvidia.com/nouse-gputype: 'A100") || true || ("'`, "annotations[nvidia.com/nouse-gputype]", "comma-separated list of card types"},
		{"a UUID with a space", "nvidia.com/gpu: 1", "nvidia.com/use-gpuuuid: 'GPU-1 x'", "annotations[nvidia.com/use-gpuuuid]", "GPU UUIDs"},
		{"an unknown scheduler policy", "nvidia.com/gpu: 1", "hami.io/gpu-scheduler-policy: tight", "annotations[hami.io/gpu-scheduler-policy]", "binpack or spread"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ann := ""
			if tc.ann != "" {
				ann = ", annotations: {" + tc.ann + "}"
			}
			in := fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns%s}\nspec:\n  containers:\n  - name: a\n    resources:\n      limits: {%s}\n", ann, tc.resources)
			out, res := convertString(t, in, Options{Claims: true})
			if out != in {
				t.Errorf("the pod changed:\n%s", out)
			}
			found := false
			for _, e := range res.Entries {
				if e.Level == Converted {
					t.Errorf("converted: %s", e)
				}
				if strings.HasSuffix(e.Path, tc.wantPath) && strings.Contains(e.Message, tc.wantMsg) {
					found = true
				}
			}
			if !found {
				t.Errorf("no entry at %s saying %q: %v", tc.wantPath, tc.wantMsg, res.Entries)
			}
		})
	}
}

// Every HAMi name of a pod is in the report: converted, or not converted with a reason.
func TestEveryHAMiNameIsReported(t *testing.T) {
	in := `apiVersion: v1
kind: Pod
metadata:
  name: p
  namespace: ns
  annotations:
    nvidia.com/use-gputype: A100
    nvidia.com/nouse-gputype: A10
    nvidia.com/use-gpuuuid: GPU-a
    nvidia.com/nouse-gpuuuid: GPU-b
    hami.io/gpu-scheduler-policy: spread
    hami.io/node-scheduler-policy: binpack
    hami.io/vgpu-node: n1
spec:
  containers:
  - name: a
    resources:
      limits: {nvidia.com/gpu: 2, nvidia.com/gpumem: 2048, nvidia.com/gpucores: 25}
  - name: b
    resources:
      limits: {nvidia.com/gpumem-percentage: 100}
`
	_, res := convertString(t, in, Options{})
	for _, name := range []string{"use-gputype", "nouse-gputype", "use-gpuuuid", "nouse-gpuuuid", "gpu-scheduler-policy", "node-scheduler-policy", "vgpu-node",
		"containers[0].resources.limits[nvidia.com/gpu]", "containers[0].resources.limits[nvidia.com/gpumem]", "containers[0].resources.limits[nvidia.com/gpucores]",
		"containers[1].resources.limits[nvidia.com/gpumem-percentage]"} {
		found := false
		for _, e := range res.Entries {
			found = found || strings.Contains(e.Path, name)
		}
		if !found {
			t.Errorf("%s is not in the report: %v", name, res.Entries)
		}
	}
	if res.Count(Converted) == 0 {
		t.Errorf("nothing converted: %v", res.Entries)
	}
}

// The webhook's conversion of a pod (HAMiPod) asks for what gpudra convert writes for the
// same pod: the same requests, selectors, capacities and constraints.
func TestHAMiPodAgreesWithConvert(t *testing.T) {
	in, res := goldenCase{input: "hami-shares"}.run(t)
	templates := map[string]resourceapi.ResourceClaimSpec{}
	for _, d := range splitDocs(t, res.Output) {
		if spec, ok := claimSpec(t, d); ok {
			templates[d.name()] = spec
		}
	}
	checked := 0
	for _, d := range splitDocs(t, in) {
		var pod corev1.Pod
		switch d.kind() {
		case "Pod":
			if err := sigsyaml.Unmarshal(d.raw, &pod); err != nil {
				t.Fatal(err)
			}
		case "Deployment", "Job":
			var w struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
				Spec     struct {
					Template corev1.PodTemplateSpec `json:"template"`
				} `json:"spec"`
			}
			if err := sigsyaml.Unmarshal(d.raw, &w); err != nil {
				t.Fatal(err)
			}
			pod.ObjectMeta, pod.Spec = w.Spec.Template.ObjectMeta, w.Spec.Template.Spec
			pod.Name, pod.Namespace = w.Metadata.Name, w.Metadata.Namespace
		default:
			continue
		}
		plan, err := HAMiPod(&pod)
		if err != nil || plan == nil {
			t.Fatalf("%s: plan %v, err %v", d.name(), plan, err)
		}
		want, ok := templates["ResourceClaimTemplate "+pod.Namespace+"/"+pod.Name+"-gpus"]
		if !ok {
			t.Fatalf("%s: no template in the output", d.name())
		}
		if !apiequality.Semantic.DeepEqual(plan.Spec, want) {
			t.Errorf("%s: the webhook asks for\n%+v\ngpudra convert for\n%+v", d.name(), plan.Spec, want)
		}
		checked++
	}
	if checked != 5 {
		t.Errorf("checked %d workloads, want 5", checked)
	}
}

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// hamiPod is a pod written for HAMi: its container asks for limits, and annotations pick
// its cards.
func hamiPod(ns, name string, annotations map[string]string, limits map[string]string) *corev1.Pod {
	l := corev1.ResourceList{}
	for k, v := range limits {
		l[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Limits: l}}}}}
}

// TestHAMiPodsGetWhatTheyAskedFor: in a namespace opted into gpudra-controller's HAMi pods
// webhook (feature gate HAMiPods), pods written for HAMi are created with gpudra claims and
// run: a vGPU gets a share consuming the memory and compute it asked for, two vGPUs shares
// of two GPUs, a card type picks a GPU of that product, and a value gpudra cannot carry
// over refuses the pod naming the field. A namespace that is not opted in is not touched.
func TestHAMiPodsGetWhatTheyAskedFor(t *testing.T) {
	inLane(t, clusterLane)
	if !state.Kueue {
		labLacks(t, "Kueue: gpudra-controller runs in labs with Kueue")
	}
	ns := namespace(t, "e2e-hami")
	patch := []byte(`{"metadata":{"labels":{"gpudra.dev/hami-pods":"enabled"}}}`)
	if _, err := client.CoreV1().Namespaces().Patch(t.Context(), ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The API server sees the label once its namespace cache has it: a dry run shows when.
	eventually(t, time.Minute, "the webhook rewrites pods of namespace "+ns, func(ctx context.Context) error {
		p, err := client.CoreV1().Pods(ns).Create(ctx, hamiPod(ns, "probe", nil, map[string]string{"nvidia.com/gpu": "1"}), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if len(p.Spec.ResourceClaims) == 0 {
			return fmt.Errorf("the dry-run pod has no claim")
		}
		return nil
	})

	// HAMi pods are NVIDIA pods: the card type comes from an NVIDIA GPU, the one of the
	// lowest name so that every run asks for the same type.
	devices := publishedDevices(t.Context(), t)
	var product, first string
	for key, d := range devices {
		if stringAttr(d, api.AttrType) == "gpu" && stringAttr(d, api.AttrVendor) == api.VendorNVIDIA && (first == "" || key < first) {
			first, product = key, stringAttr(d, api.AttrProductName)
		}
	}
	fields := strings.Fields(product)
	if len(fields) < 2 {
		t.Fatalf("no GPU product name to pick a card type from (%q)", product)
	}
	cardType := strings.SplitN(fields[1], "-", 2)[0] // "A100" of "NVIDIA A100-SXM4-40GB"

	pods := []*corev1.Pod{
		hamiPod(ns, "vgpu", nil, map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}),
		hamiPod(ns, "two-vgpus", nil, map[string]string{"nvidia.com/gpu": "2", "nvidia.com/gpumem": "2048"}),
		hamiPod(ns, "typed", map[string]string{"nvidia.com/use-gputype": strings.ToLower(cardType)}, map[string]string{"nvidia.com/gpu": "1"}),
	}
	for _, p := range pods {
		created, err := client.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("pod %s: %v", p.Name, err)
		}
		for r := range created.Spec.Containers[0].Resources.Limits {
			if strings.HasPrefix(string(r), "nvidia.com/") {
				t.Errorf("pod %s kept %s", p.Name, r)
			}
		}
		if len(created.Spec.ResourceClaims) != 1 || created.Spec.ResourceClaims[0].ResourceClaimTemplateName == nil {
			t.Fatalf("pod %s: claims %+v, want one from a template", p.Name, created.Spec.ResourceClaims)
		}
	}
	for _, p := range pods {
		eventually(t, 2*time.Minute, "HAMi pod "+p.Name+" runs", podRunning(ns, p.Name))
	}
	results := func(pod string) []resourcev1.DeviceRequestAllocationResult {
		t.Helper()
		rs, err := allocated(t.Context(), ns, templateClaim(t, getPod(t, ns, pod), "gpus"))
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	consumed := func(r resourcev1.DeviceRequestAllocationResult, name resourcev1.QualifiedName) resource.Quantity {
		return r.ConsumedCapacity[name]
	}

	if rs := results("vgpu"); len(rs) != 1 {
		t.Errorf("vgpu: %d devices, want 1", len(rs))
	} else if m, c := consumed(rs[0], api.CapMemory), consumed(rs[0], api.CapCompute); m.Cmp(resource.MustParse("3000Mi")) != 0 || c.Cmp(resource.MustParse("30")) != 0 {
		t.Errorf("vgpu: device %s consumed memory %s and compute %s, want 3000Mi and 30", rs[0].Device, m.String(), c.String())
	}
	if rs := results("two-vgpus"); len(rs) != 2 || rs[0].Device == rs[1].Device || rs[0].Pool != rs[1].Pool {
		t.Errorf("two-vgpus: %+v, want shares of two GPUs of one node", rs)
	}
	for _, r := range results("typed") {
		got := stringAttr(devices[r.Pool+"/"+r.Device], api.AttrProductName)
		if !strings.Contains(strings.ToUpper(got), strings.ToUpper(cardType)) {
			t.Errorf("typed: device %s/%s is a %s, want a %s", r.Pool, r.Device, got, cardType)
		}
	}

	// A value gpudra cannot carry over refuses the pod.
	_, err := client.CoreV1().Pods(ns).Create(t.Context(), hamiPod(ns, "too-many-cores", nil, map[string]string{"nvidia.com/gpumem": "1024", "nvidia.com/gpucores": "150"}), metav1.CreateOptions{})
	for _, want := range []string{"nvidia.com/gpucores", "from 0 to 100"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("gpucores 150: err %v, want it to name %s", err, want)
		}
	}

	// A namespace that is not opted in keeps its pods as written.
	other := namespace(t, "e2e-hami-off")
	p, err := client.CoreV1().Pods(other).Create(t.Context(), hamiPod(other, "vgpu", nil, map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024"}), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Spec.ResourceClaims) != 0 || p.Spec.Containers[0].Resources.Limits["nvidia.com/gpumem"] == (resource.Quantity{}) {
		t.Errorf("a pod of a namespace not opted in was rewritten: %+v", p.Spec)
	}
}

func getPod(t *testing.T, ns, name string) corev1.Pod {
	t.Helper()
	p, err := client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return *p
}

package admission

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/driver/allocation"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// torLab is lab with rack r1 behind ToR tor-a (uplinks oversubscribed 3:1) and rack r2
// split between ToRs tor-b1 (r2-n1, r2-n2) and tor-b2 (r2-n3, r2-n4), oversubscribed r2
// (empty: not said), and a claim template for one GPU.
func torLab(t *testing.T, r2 string, extra ...client.Object) client.Client {
	t.Helper()
	spec, err := allocation.ParseClaimSpec([]byte("devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.gpudra.dev}}]}"))
	if err != nil {
		t.Fatal(err)
	}
	c := lab(t, append(extra, &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "gpu1"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec}})...)
	tors := map[string][2]string{
		"r1-n1": {"tor-a", "3"}, "r1-n2": {"tor-a", "3"}, "r1-n3": {"tor-a", "3"}, "r1-n4": {"tor-a", "3"},
		"r2-n1": {"tor-b1", r2}, "r2-n2": {"tor-b1", r2}, "r2-n3": {"tor-b2", r2}, "r2-n4": {"tor-b2", r2},
	}
	for name, tor := range tors {
		var n corev1.Node
		if err := c.Get(context.Background(), types.NamespacedName{Name: name}, &n); err != nil {
			t.Fatal(err)
		}
		n.Labels[api.LabelToR] = tor[0]
		if tor[1] != "" {
			n.Labels[api.LabelToROversubscription] = tor[1]
		}
		if err := c.Update(context.Background(), &n); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// threeD is 2 data × 4 pipeline × 4 tensor parallel as 32 one-GPU pods: tensor-parallel
// groups of 4 per host inside pipelines of 16 kept under one ToR by the network rule.
func threeD(name string, annotations map[string]string) *kueue.Workload {
	wl := job(name, "workers")
	ps := &wl.Spec.PodSets[0]
	ps.Count = 32
	ps.Template.Spec.ResourceClaims[0].ResourceClaimTemplateName = ptr.To("gpu1")
	ps.Template.Annotations = map[string]string{
		api.AnnotationRequiredTopology:     "block",
		api.AnnotationSliceSize:            "16",
		api.AnnotationSliceNetworkTopology: "tor",
		api.AnnotationSubsliceSize:         "4",
		api.AnnotationSubsliceTopology:     "hostname",
	}
	for k, v := range annotations {
		if v == "" {
			delete(ps.Template.Annotations, k)
		} else {
			ps.Template.Annotations[k] = v
		}
	}
	return wl
}

func TestTwoLevelSlicesAndTheToRRule(t *testing.T) {
	t.Run("tensor-parallel groups per host, pipelines kept by their ToRs' oversubscription", func(t *testing.T) {
		c := torLab(t, "1:1", threeD("train", nil))
		got := reconcile(t, newReconciler(c), "train")
		if got.State != kueue.CheckStateReady {
			t.Fatalf("state %s: %s", got.State, got.Message)
		}
		for _, want := range []string{
			"workers in block b1",
			"workers: slices of 16 kept under one ToR (required: b1/r1/tor-a uplinks oversubscribed 3:1)",
			"workers: slice 1 spans b1/r2/tor-b1, b1/r2/tor-b2: one ToR only preferred, their ToRs are non-blocking",
		} {
			if !strings.Contains(got.Message, want) {
				t.Errorf("message %q does not say %q", got.Message, want)
			}
		}
		nodes := strings.Split(got.PodSetUpdates[0].Annotations[api.AnnotationPlacement], ",")
		if len(nodes) != 32 {
			t.Fatalf("placement %v, want 32 nodes", nodes)
		}
		for pod, n := range nodes {
			if group := pod / 4 * 4; n != nodes[group] {
				t.Errorf("pod %d on %s, its tensor-parallel group's first pod on %s", pod, n, nodes[group])
			}
			if pipeline := pod / 16; !strings.HasPrefix(n, []string{"r1-", "r2-"}[pipeline]) {
				t.Errorf("pod %d of pipeline %d on %s", pod, pipeline, n)
			}
		}
		rep := explainOf(t, c, "train")
		ps := rep.PodSets[0]
		if ps.SliceNetwork != "tor" || ps.SubsliceSize != 4 || ps.SubsliceRequired != "hostname" || ps.Planned == nil || len(ps.Planned.Notes) != 2 {
			t.Errorf("explain: %+v planned %+v", ps, ps.Planned)
		}
	})
	t.Run("oversubscribed ToRs too small for a pipeline: retry, saying the rule", func(t *testing.T) {
		got := reconcile(t, newReconciler(torLab(t, "3:1", threeD("train", nil))), "train")
		want := "slices must each stay under one ToR where its uplinks are oversubscribed: b1/r1/tor-a 3:1, b1/r2/tor-b1 3:1, b1/r2/tor-b2 3:1"
		if got.State != kueue.CheckStateRetry || !strings.Contains(got.Message, want) {
			t.Fatalf("%s %q, want Retry saying %q", got.State, got.Message, want)
		}
	})
	t.Run("a pod set required under one ToR is pinned to it", func(t *testing.T) {
		wl := threeD("small", map[string]string{api.AnnotationRequiredTopology: "tor", api.AnnotationSliceSize: "", api.AnnotationSliceNetworkTopology: ""})
		wl.Spec.PodSets[0].Count = 8
		c := torLab(t, "", wl)
		got := reconcile(t, newReconciler(c), "small")
		if got.State != kueue.CheckStateReady {
			t.Fatalf("state %s: %s", got.State, got.Message)
		}
		sel := got.PodSetUpdates[0].NodeSelector
		if sel[api.LabelBlock] != "b1" || sel[api.LabelRack] != "r1" || sel[api.LabelToR] != "tor-a" {
			t.Errorf("node selector %v, want block b1, rack r1, ToR tor-a", sel)
		}
		var names []string
		for _, d := range explainOf(t, c, "small").PodSets[0].Domains {
			names = append(names, d.Name+"="+d.ToR)
		}
		if got := strings.Join(names, " "); got != "b1/r1/tor-a=tor-a b1/r2/tor-b1=tor-b1 b1/r2/tor-b2=tor-b2" {
			t.Errorf("explain's domains %s, want the three ToRs", got)
		}
	})
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        string
	}{
		{"a subslice size that is no number", map[string]string{api.AnnotationSubsliceSize: "four"},
			`spec.podSets[0] (workers): annotation gpudra.dev/subslice-size="four": must be an integer of at least 1`},
		{"a slice size of 0", map[string]string{api.AnnotationSliceSize: "0"},
			`spec.podSets[0] (workers): annotation gpudra.dev/slice-size="0": must be an integer of at least 1`},
		{"a subslice that does not divide its slice", map[string]string{api.AnnotationSubsliceSize: "3"},
			"spec.podSets[0] (workers): podSet workers: annotation gpudra.dev/subslice-size 3: must divide gpudra.dev/slice-size 16 (16)"},
		{"a network level that is no switch", map[string]string{api.AnnotationSliceNetworkTopology: "rack"},
			`annotation gpudra.dev/slice-topology "rack": accepted values are block, tor`},
	} {
		t.Run(tc.name+" is rejected", func(t *testing.T) {
			got := reconcile(t, newReconciler(torLab(t, "", threeD("bad", tc.annotations))), "bad")
			if got.State != kueue.CheckStateRejected || !strings.Contains(got.Message, tc.want) {
				t.Fatalf("%s %q, want Rejected saying %q", got.State, got.Message, tc.want)
			}
		})
	}
}

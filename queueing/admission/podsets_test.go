package admission

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

var maintenance = corev1.Taint{Key: "example.com/maintenance", Value: "true", Effect: corev1.TaintEffectNoSchedule}

// withFlavor has Kueue assign the ResourceFlavor to every pod set of the workload.
func withFlavor(wl *kueue.Workload, flavor string) *kueue.Workload {
	wl.Status.Admission = &kueue.Admission{ClusterQueue: "gpus"}
	for _, ps := range wl.Spec.PodSets {
		wl.Status.Admission.PodSetAssignments = append(wl.Status.Admission.PodSetAssignments, kueue.PodSetAssignment{
			Name: ps.Name, Flavors: map[corev1.ResourceName]kueue.ResourceFlavorReference{"gpu.gpudra.dev": kueue.ResourceFlavorReference(flavor)}})
	}
	return wl
}

// editNodes changes the lab's nodes before the check runs.
func editNodes(t *testing.T, c client.Client, edit func(*corev1.Node), names ...string) {
	t.Helper()
	for _, name := range names {
		var n corev1.Node
		if err := c.Get(context.Background(), types.NamespacedName{Name: name}, &n); err != nil {
			t.Fatal(err)
		}
		edit(&n)
		if err := c.Update(context.Background(), &n); err != nil {
			t.Fatal(err)
		}
	}
}

func taint(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, maintenance) }

func TestPodSetsHonourTaintsTolerationsAndFlavors(t *testing.T) {
	tolerates := []corev1.Toleration{{Key: maintenance.Key, Operator: corev1.TolerationOpExists}}
	// One pod set of four 4-GPU pods in one rack; untainted, it goes to the first rack, r1.
	for _, tc := range []struct {
		name     string
		wl       *kueue.Workload
		flavor   *kueue.ResourceFlavor
		tainted  []string
		labelled []string // nodes labelled pool=b
		wantRack string   // "" = Retry
		wantMsg  []string
	}{
		{name: "a tainted node sends the gang to the other rack",
			wl: job("train", "dp0"), tainted: []string{"r1-n1"}, wantRack: "r2"},
		{name: "the pod template's toleration lets it use the tainted rack",
			wl: func() *kueue.Workload {
				wl := job("train", "dp0")
				wl.Spec.PodSets[0].Template.Spec.Tolerations = tolerates
				return wl
			}(), tainted: []string{"r1-n1"}, wantRack: "r1"},
		{name: "the assigned ResourceFlavor's toleration lets it use the tainted rack",
			wl:      withFlavor(job("train", "dp0"), "maint"),
			flavor:  &kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "maint"}, Spec: kueue.ResourceFlavorSpec{Tolerations: tolerates}},
			tainted: []string{"r1-n1"}, wantRack: "r1"},
		{name: "the assigned ResourceFlavor's node labels limit the nodes",
			wl:       withFlavor(job("train", "dp0"), "pool-b"),
			flavor:   &kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "pool-b"}, Spec: kueue.ResourceFlavorSpec{NodeLabels: map[string]string{"pool": "b"}}},
			labelled: []string{"r2-n1", "r2-n2", "r2-n3", "r2-n4"}, wantRack: "r2"},
		{name: "when only taints keep the gang out, Retry says which",
			wl: job("train", "dp0"), tainted: []string{"r1-n1", "r2-n4"},
			wantMsg: []string{"only taints keep it out", "example.com/maintenance=true:NoSchedule (2 nodes)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []client.Object{tc.wl}
			if tc.flavor != nil {
				objs = append(objs, tc.flavor)
			}
			c := lab(t, objs...)
			editNodes(t, c, taint, tc.tainted...)
			editNodes(t, c, func(n *corev1.Node) { n.Labels["pool"] = "b" }, tc.labelled...)
			got := reconcile(t, newReconciler(c), "train")
			if tc.wantRack == "" {
				if got.State != kueue.CheckStateRetry {
					t.Fatalf("state %s %q, want Retry", got.State, got.Message)
				}
				for _, want := range tc.wantMsg {
					if !strings.Contains(got.Message, want) {
						t.Errorf("message %q does not say %q", got.Message, want)
					}
				}
				return
			}
			if got.State != kueue.CheckStateReady {
				t.Fatalf("state %s: %s", got.State, got.Message)
			}
			if rack := got.PodSetUpdates[0].NodeSelector[api.LabelRack]; rack != tc.wantRack {
				t.Errorf("pinned to rack %s (placement %s), want %s", rack, got.PodSetUpdates[0].Annotations[api.AnnotationPlacement], tc.wantRack)
			}
		})
	}
}

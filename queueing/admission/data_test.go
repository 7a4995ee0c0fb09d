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

// labelNodes adds a label to the named nodes of the lab.
func labelNodes(t *testing.T, c client.Client, key, value string, nodes ...string) {
	t.Helper()
	for _, n := range nodes {
		var node corev1.Node
		if err := c.Get(context.Background(), types.NamespacedName{Name: n}, &node); err != nil {
			t.Fatal(err)
		}
		node.Labels[key] = value
		if err := c.Update(context.Background(), &node); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDatasetsPreferTheCachingRack(t *testing.T) {
	t.Run("a gang naming a dataset is planned in the rack caching it, and explain says so", func(t *testing.T) {
		wl := job("train", "dp0")
		wl.Spec.PodSets[0].Template.Annotations[api.AnnotationDatasets] = "imagenet"
		c := lab(t, wl)
		labelNodes(t, c, "dataset.gpudra.dev/team-a.imagenet", "cached", "r2-n1", "r2-n2", "r2-n3")
		rep := explainOf(t, c, "train")
		if rep.Now.State != string(kueue.CheckStateReady) || !strings.Contains(rep.Now.Message, "dp0 in rack b1/r2") ||
			!strings.Contains(rep.Now.Message, "dataset team-a/imagenet cached on 3 of 4 nodes of b1/r2; 3 of 4 pods planned there") {
			t.Errorf("now %+v, want Ready in b1/r2 with the dataset's line", rep.Now)
		}
		ps := rep.PodSets[0]
		if got := ps.Domains[0].Data; len(got) != 1 || got[0] != "dataset team-a/imagenet cached on 0 of 4 nodes of b1/r1" {
			t.Errorf("rack 1 data %q", got)
		}
		if got := ps.Domains[1].Data; len(got) != 1 || got[0] != "dataset team-a/imagenet cached on 3 of 4 nodes of b1/r2" {
			t.Errorf("rack 2 data %q", got)
		}
		if ps.Planned == nil || ps.Planned.Domain != "b1/r2" || strings.Join(ps.Planned.Nodes[:3], ",") != "r2-n1,r2-n2,r2-n3" {
			t.Errorf("planned %+v, want b1/r2, the caching nodes first", ps.Planned)
		}
	})

	t.Run("a Fluid volume's cache label comes from its PersistentVolume", func(t *testing.T) {
		wl := job("train", "dp0")
		wl.Spec.PodSets[0].Template.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "imagenet"}}}}
		pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "team-a-imagenet", Labels: map[string]string{"fluid.io/s-3d9c0e1f": "true"}},
			Spec: corev1.PersistentVolumeSpec{StorageClassName: "fluid", PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: "fuse.csi.fluid.io", VolumeHandle: "team-a-imagenet"}}}}
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "imagenet"},
			Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "team-a-imagenet"}}
		c := lab(t, wl, pv, pvc)
		labelNodes(t, c, "fluid.io/s-3d9c0e1f", "true", "r2-n4")
		rep := explainOf(t, c, "train")
		if p := rep.PodSets[0].Planned; p == nil || p.Domain != "b1/r2" || p.Nodes[0] != "r2-n4" {
			t.Errorf("planned %+v, want b1/r2 starting on r2-n4", p)
		}
	})

	t.Run("a malformed annotation is rejected, naming it and the accepted form", func(t *testing.T) {
		wl := job("train", "dp0")
		wl.Spec.PodSets[0].Template.Annotations[api.AnnotationDatasets] = "a/b/c"
		rep := explainOf(t, lab(t, wl), "train")
		if rep.Now.State != string(kueue.CheckStateRejected) || !strings.Contains(rep.Now.Message, "spec.podSets[0] (dp0): annotation gpudra.dev/datasets") ||
			!strings.Contains(rep.Now.Message, "<namespace>/<name> or <name>") {
			t.Errorf("now %+v, want Rejected naming the annotation", rep.Now)
		}
	})
}

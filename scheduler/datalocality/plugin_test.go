package datalocality

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/locality"
)

// handle is the part of the framework handle the plugin uses.
type handle struct {
	fwk.Handle
	informers informers.SharedInformerFactory
}

func (h handle) SharedInformerFactory() informers.SharedInformerFactory { return h.informers }

// scores runs PreScore and Score for pod over nodes: the score by node name, or nil when
// the plugin skips the pod.
func scores(t *testing.T, pod *corev1.Pod, nodes []*corev1.Node, objects ...*corev1.PersistentVolume) map[string]int64 {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	for _, pv := range objects {
		if _, err := client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pvc := st.MakePersistentVolumeClaim().Namespace("team").Name("imagenet").VolumeName("team-imagenet").Obj()
	if _, err := client.CoreV1().PersistentVolumeClaims("team").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f := informers.NewSharedInformerFactory(client, 0)
	pl, err := New(ctx, nil, handle{informers: f})
	if err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	p := pl.(*Plugin)
	infos := make([]fwk.NodeInfo, len(nodes))
	for i, n := range nodes {
		ni := framework.NewNodeInfo()
		ni.SetNode(n)
		infos[i] = ni
	}
	cs := framework.NewCycleState()
	status := p.PreScore(ctx, cs, pod, infos)
	if status.IsSkip() {
		return nil
	}
	if !status.IsSuccess() {
		t.Fatalf("PreScore: %v", status)
	}
	out := map[string]int64{}
	for _, ni := range infos {
		s, status := p.Score(ctx, cs, pod, ni)
		if !status.IsSuccess() {
			t.Fatalf("Score on %s: %v", ni.Node().Name, status)
		}
		out[ni.Node().Name] = s
	}
	return out
}

func TestScore(t *testing.T) {
	nodes := []*corev1.Node{
		st.MakeNode().Name("none").Obj(),
		st.MakeNode().Name("coco").Label("dataset.gpudra.dev/team.coco", "cached").Obj(),
		st.MakeNode().Name("both").Label("dataset.gpudra.dev/team.coco", "cached").Label("dataset.gpudra.dev/data.imagenet", "cached").Obj(),
		st.MakeNode().Name("fluid").Label("fluid.io/s-team-imagenet", "true").Obj(),
	}
	fluidPV := st.MakePersistentVolume().Name("team-imagenet").StorageClassName(locality.FluidStorageClass).
		Label("fluid.io/s-team-imagenet", "true").
		PersistentVolumeSource(corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: locality.FluidCSIDriver, VolumeHandle: "team-imagenet"}}).Obj()
	cases := []struct {
		name string
		pod  *corev1.Pod
		want map[string]int64
	}{
		{name: "nodes caching more of the named datasets score higher",
			pod:  st.MakePod().Namespace("team").Name("p").Annotation(api.AnnotationDatasets, "coco,data/imagenet").Obj(),
			want: map[string]int64{"none": 0, "coco": 50, "both": 100, "fluid": 0}},
		{name: "a Fluid volume's dataset is cached where its volume's label is",
			pod:  st.MakePod().Namespace("team").Name("p").PVC("imagenet").Obj(),
			want: map[string]int64{"none": 0, "coco": 0, "both": 0, "fluid": 100}},
		{name: "a dataset Fluid's own affinity already prefers is not counted twice",
			pod: st.MakePod().Namespace("team").Name("p").PVC("imagenet").NodeAffinity(&corev1.NodeAffinity{
				PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100, Preference: corev1.NodeSelectorTerm{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "fluid.io/s-team-imagenet", Operator: corev1.NodeSelectorOpIn, Values: []string{"true"}}}}}},
			}).Obj()},
		{name: "a pod reading no dataset is left to the other plugins", pod: st.MakePod().Namespace("team").Name("p").Obj()},
		{name: "a malformed annotation does not keep the pod from scheduling",
			pod: st.MakePod().Namespace("team").Name("p").Annotation(api.AnnotationDatasets, "a/b/c").Obj()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := scores(t, c.pod, nodes, fluidPV)
			if len(got) != len(c.want) {
				t.Fatalf("scores %v, want %v", got, c.want)
			}
			for n, s := range c.want {
				if got[n] != s {
					t.Errorf("node %s: score %d, want %d (all: %v)", n, got[n], s, got)
				}
			}
		})
	}
}

// Pods alike for the score sign alike; pods whose datasets may differ do not; pods mounting
// claims are not signable.
func TestSignPod(t *testing.T) {
	p := &Plugin{}
	sign := func(pod *corev1.Pod) (string, bool) {
		f, status := p.SignPod(context.Background(), pod)
		if !status.IsSuccess() {
			return "", false
		}
		return fmt.Sprint(f), true
	}
	base := st.MakePod().Namespace("team").Name("a").Annotation(api.AnnotationDatasets, "coco").Obj()
	same := st.MakePod().Namespace("team").Name("b").Annotation(api.AnnotationDatasets, "coco").Obj()
	a, _ := sign(base)
	if b, _ := sign(same); a != b {
		t.Errorf("two pods reading the same dataset sign %s and %s", a, b)
	}
	for name, other := range map[string]*corev1.Pod{
		"another dataset":   st.MakePod().Namespace("team").Name("c").Annotation(api.AnnotationDatasets, "imagenet").Obj(),
		"another namespace": st.MakePod().Namespace("data").Name("c").Annotation(api.AnnotationDatasets, "coco").Obj(),
		"no annotation":     st.MakePod().Namespace("team").Name("c").Obj(),
		"a preferred affinity": st.MakePod().Namespace("team").Name("c").Annotation(api.AnnotationDatasets, "coco").NodeAffinity(&corev1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100, Preference: corev1.NodeSelectorTerm{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "fluid.io/s-team-coco", Operator: corev1.NodeSelectorOpExists}}}}},
		}).Obj(),
	} {
		if b, _ := sign(other); a == b {
			t.Errorf("%s: signs as the base pod (%s)", name, a)
		}
	}
	if _, ok := sign(st.MakePod().Namespace("team").Name("c").PVC("imagenet").Obj()); ok {
		t.Error("a pod mounting a claim is signable")
	}
}

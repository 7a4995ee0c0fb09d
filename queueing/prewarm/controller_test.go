package prewarm

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/locality"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

func workload(name, datasets string) *kueue.Workload {
	return &kueue.Workload{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, UID: types.UID(name + "-uid")},
		Spec: kueue.WorkloadSpec{PodSets: []kueue.PodSet{{Name: "workers", Count: 2, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{api.AnnotationDatasets: datasets}},
			Spec: corev1.PodSpec{
				NodeSelector: map[string]string{"pool": "gpu"},
				Containers:   []corev1.Container{{Name: "w", Image: "trainer"}},
			},
		}}}},
	}
}

type env struct {
	r      *Reconciler
	c      client.Client
	events *events.FakeRecorder
}

func newEnv(t *testing.T, served bool, objs ...client.Object) *env {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, kueue.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []struct {
		name   string
		labels map[string]string
	}{
		{"n1", map[string]string{"pool": "gpu", "dataset.gpudra.dev/team-a.imagenet": "cached"}},
		{"n2", map[string]string{"pool": "gpu"}},
		{"n3", map[string]string{"pool": "gpu"}},
		{"cpu1", map[string]string{"pool": "cpu"}},
	} {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: n.labels}})
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&kueue.Workload{}).Build()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{DataLoadResource: "DataLoadList"})
	rec := events.NewFakeRecorder(20)
	return &env{r: &Reconciler{Client: c, Dynamic: dyn, Served: func(context.Context) (bool, error) { return served, nil }, Recorder: rec}, c: c, events: rec}
}

func (e *env) reconcile(t *testing.T, name string) reconcile.Result {
	t.Helper()
	res, err := e.r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: name}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (e *env) dataLoads(t *testing.T) []string {
	t.Helper()
	list, err := e.r.Dynamic.Resource(DataLoadResource).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range list.Items {
		out = append(out, d.GetNamespace()+"/"+d.GetName())
	}
	return out
}

func (e *env) drain() []string {
	var out []string
	for {
		select {
		case ev := <-e.events.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

func TestPrewarmWithDataLoads(t *testing.T) {
	wl := workload("train", "imagenet, data/coco")
	e := newEnv(t, true, wl)
	e.reconcile(t, "train")
	e.reconcile(t, "train") // idempotent
	want := "team-a/" + DataLoadName(wl, locality.Dataset{Namespace: "team-a", Name: "imagenet"})
	if got := e.dataLoads(t); len(got) != 1 || got[0] != want {
		t.Fatalf("DataLoads %v, want only %s (data/coco is in another namespace)", got, want)
	}
	dl, err := e.r.Dynamic.Resource(DataLoadResource).Namespace("team-a").Get(context.Background(), strings.TrimPrefix(want, "team-a/"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owners := dl.GetOwnerReferences()
	if len(owners) != 1 || owners[0].Kind != "Workload" || owners[0].UID != wl.UID || dl.GetLabels()[api.LabelWorkload] != string(wl.UID) {
		t.Errorf("DataLoad owners %+v, labels %v: want the Workload and its UID", owners, dl.GetLabels())
	}
	if ds, _, _ := unstructured.NestedString(dl.Object, "spec", "dataset", "name"); ds != "imagenet" {
		t.Errorf("DataLoad spec.dataset.name %q, want imagenet", ds)
	}
	evs := e.drain()
	if len(evs) != 2 || !strings.Contains(strings.Join(evs, "\n"), "dataset data/coco is cached on 0 of the 3 nodes its pods may run on; not cached on n1, n2, n3") {
		t.Errorf("events %q, want one Prewarm and one naming the nodes for data/coco, each once", evs)
	}

	// Admitted: its DataLoads go.
	apimeta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: kueue.WorkloadAdmitted, Status: metav1.ConditionTrue, Reason: "Admitted"})
	if err := e.c.Status().Update(context.Background(), wl); err != nil {
		t.Fatal(err)
	}
	e.reconcile(t, "train")
	if got := e.dataLoads(t); len(got) != 0 {
		t.Errorf("DataLoads of an admitted Workload %v, want none", got)
	}
}

func TestPrewarmBounded(t *testing.T) {
	e := newEnv(t, true, workload("a", "imagenet"), workload("b", "imagenet"))
	e.r.MaxDataLoads = 1
	e.reconcile(t, "a")
	res := e.reconcile(t, "b")
	if got := e.dataLoads(t); len(got) != 1 {
		t.Errorf("DataLoads %v, want 1 (the bound)", got)
	}
	if res.RequeueAfter == 0 {
		t.Error("a Workload kept back by the bound is not looked at again")
	}
	if evs := strings.Join(e.drain(), "\n"); !strings.Contains(evs, "1 DataLoads are kept at most") {
		t.Errorf("events %q, want one saying the bound kept it back", evs)
	}
}

func TestPrewarmWithoutFluidNamesNodes(t *testing.T) {
	e := newEnv(t, false, workload("train", "imagenet"))
	e.reconcile(t, "train")
	e.reconcile(t, "train")
	evs := e.drain()
	if len(evs) != 1 || !strings.Contains(evs[0], "dataset team-a/imagenet is cached on 1 of the 3 nodes its pods may run on; not cached on n2, n3 (label dataset.gpudra.dev/team-a.imagenet; no DataLoad kind is served") {
		t.Errorf("events %q, want one naming n2 and n3", evs)
	}
	if got := e.dataLoads(t); len(got) != 0 {
		t.Errorf("DataLoads %v without the kind served", got)
	}
}

func TestDataLoadName(t *testing.T) {
	wl := workload("train", "")
	long := locality.Dataset{Namespace: "team-a", Name: strings.Repeat("d", 70)}
	for _, d := range []locality.Dataset{{Namespace: "team-a", Name: "imagenet"}, long} {
		name := DataLoadName(wl, d)
		if name != DataLoadName(wl, d) || len(name) > maxNameLen || len(validation.IsDNS1123Label(name)) > 0 {
			t.Errorf("DataLoadName(%v) = %q: want the same each time, a DNS label of at most %d characters", d, name, maxNameLen)
		}
	}
	other := workload("other", "")
	other.UID = "other-uid"
	if DataLoadName(wl, long) == DataLoadName(other, long) {
		t.Error("two Workloads share a DataLoad name")
	}
}

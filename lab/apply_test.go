package lab

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

func fakeApplier(t *testing.T, existing ...runtime.Object) (*Applier, *dynamicfake.FakeDynamicClient) {
	t.Helper()
	checks := schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "admissionchecks"}
	queues := schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		checks: "AdmissionCheckList", queues: "ClusterQueueList", jobsGVR: "JobList",
	}, existing...)
	dc := kubefake.NewClientset().Discovery().(*fakediscovery.FakeDiscovery)
	dc.Resources = []*metav1.APIResourceList{
		{GroupVersion: "kueue.x-k8s.io/v1beta2", APIResources: []metav1.APIResource{
			{Name: "admissionchecks", Kind: "AdmissionCheck"},
			{Name: "clusterqueues", Kind: "ClusterQueue"},
		}},
		{GroupVersion: "batch/v1", APIResources: []metav1.APIResource{{Name: "jobs", Kind: "Job", Namespaced: true}}},
	}
	return newApplier(dc, dyn), dyn
}

func object(apiVersion, kind, ns, name string) *unstructured.Unstructured {
	o := &unstructured.Unstructured{}
	o.SetAPIVersion(apiVersion)
	o.SetKind(kind)
	o.SetNamespace(ns)
	o.SetName(name)
	return o
}

// An object the cluster already holds (the lab's AdmissionCheck) is not missing, so a test
// that applies it again does not delete it for the tests after it.
func TestMissingLeavesOutWhatTheClusterHolds(t *testing.T) {
	check := object("kueue.x-k8s.io/v1beta2", "AdmissionCheck", "", "gpudra-topology")
	ap, _ := fakeApplier(t, check.DeepCopy())
	queue := object("kueue.x-k8s.io/v1beta2", "ClusterQueue", "", "team-a")
	job := object("batch/v1", "Job", "team-a", "train")
	missing, err := ap.Missing(t.Context(), check, queue, job)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range missing {
		names = append(names, o.GetKind()+"/"+o.GetName())
	}
	if len(names) != 2 || names[0] != "ClusterQueue/team-a" || names[1] != "Job/train" {
		t.Errorf("missing %v, want [ClusterQueue/team-a Job/train]", names)
	}
}

// Deleting a Job deletes its pods too (background propagation), not orphans them holding
// their GPUs.
func TestDeleteTakesWhatAnObjectOwns(t *testing.T) {
	job := object("batch/v1", "Job", "team-a", "train")
	ap, dyn := fakeApplier(t, job.DeepCopy())
	if err := ap.Delete(t.Context(), job, object("batch/v1", "Job", "team-a", "gone")); err != nil {
		t.Fatal(err)
	}
	deletes := 0
	for _, a := range dyn.Actions() {
		d, ok := a.(clienttesting.DeleteActionImpl)
		if !ok {
			continue
		}
		deletes++
		if p := d.DeleteOptions.PropagationPolicy; p == nil || *p != metav1.DeletePropagationBackground {
			t.Errorf("delete %s/%s with propagation %v, want Background", d.Namespace, d.Name, p)
		}
	}
	if deletes != 2 {
		t.Errorf("%d deletes, want 2", deletes)
	}
}

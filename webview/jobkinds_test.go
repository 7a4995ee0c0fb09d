package webview

import (
	"context"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// A JobSet's Workload: its page names the JobSet, and the page of a pod of one of the
// JobSet's Jobs links to it.
func TestWorkloadPageOfAJobSet(t *testing.T) {
	f := newFixture(t)
	wl := &kueue.Workload{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "jobset-train-js-9z8y7",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "jobset.x-k8s.io/v1alpha2", Kind: "JobSet", Name: "train-js", UID: "uid-train-js"}}},
		Spec: kueue.WorkloadSpec{QueueName: "default", PodSets: []kueue.PodSet{{Name: "workers", Count: 1,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "cuda"}}}}}}},
	}
	if _, err := f.dyn.Resource(workloadsGVR).Namespace(testNS).Create(context.Background(), toUnstructured(t, wl, "Workload"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const path = "/workloads/team-a/jobset-train-js-9z8y7"
	eventually(t, func() bool {
		status, page := fetch(t, f.http.URL+path)
		return status == http.StatusOK && strings.Contains(page, "jobset/train-js")
	})
	lacks(t, get(t, f.http.URL+path, http.StatusOK), "· job/")

	pod := gpuPod("train-js-workers-0-0", "train-js-workers-0", "")
	pod.Labels = map[string]string{"jobset.sigs.k8s.io/jobset-name": "train-js"}
	if _, err := f.kube.CoreV1().Pods(testNS).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool {
		status, page := fetch(t, f.http.URL+"/pods/team-a/train-js-workers-0-0")
		return status == http.StatusOK && strings.Contains(page, `href="`+path+`"`)
	})
}

// A PyTorchJob's Workload: its page names the PyTorchJob, and the page of a pod the
// PyTorchJob owns links to it.
func TestWorkloadPageOfAPyTorchJob(t *testing.T) {
	f := newFixture(t)
	wl := &kueue.Workload{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "pytorchjob-pt-5x6w7",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: "pt", UID: "uid-pt"}}},
		Spec: kueue.WorkloadSpec{QueueName: "default", PodSets: []kueue.PodSet{{Name: "worker", Count: 1,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "cuda"}}}}}}},
	}
	if _, err := f.dyn.Resource(workloadsGVR).Namespace(testNS).Create(context.Background(), toUnstructured(t, wl, "Workload"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const path = "/workloads/team-a/pytorchjob-pt-5x6w7"
	eventually(t, func() bool {
		status, page := fetch(t, f.http.URL+path)
		return status == http.StatusOK && strings.Contains(page, "pytorchjob/pt")
	})
	pod := gpuPod("pt-worker-0", "pt", "")
	pod.OwnerReferences[0].APIVersion, pod.OwnerReferences[0].Kind = "kubeflow.org/v1", "PyTorchJob"
	if _, err := f.kube.CoreV1().Pods(testNS).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool {
		status, page := fetch(t, f.http.URL+"/pods/team-a/pt-worker-0")
		return status == http.StatusOK && strings.Contains(page, `href="`+path+`"`)
	})
}

// A TrainJob's Workload: its page names the TrainJob, and the page of a pod of the JobSet
// Trainer made for it (named after the TrainJob) links to it.
func TestWorkloadPageOfATrainJob(t *testing.T) {
	f := newFixture(t)
	wl := &kueue.Workload{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "trainjob-tj-7e8f9",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Name: "tj", UID: "uid-tj"}}},
		Spec: kueue.WorkloadSpec{QueueName: "default", PodSets: []kueue.PodSet{{Name: "node", Count: 1,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "node", Image: "cuda"}}}}}}},
	}
	if _, err := f.dyn.Resource(workloadsGVR).Namespace(testNS).Create(context.Background(), toUnstructured(t, wl, "Workload"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const path = "/workloads/team-a/trainjob-tj-7e8f9"
	eventually(t, func() bool {
		status, page := fetch(t, f.http.URL+path)
		return status == http.StatusOK && strings.Contains(page, "trainjob/tj")
	})
	lacks(t, get(t, f.http.URL+path, http.StatusOK), "· job/")

	pod := gpuPod("tj-node-0-0", "tj-node-0", "")
	pod.Labels = map[string]string{"jobset.sigs.k8s.io/jobset-name": "tj"}
	if _, err := f.kube.CoreV1().Pods(testNS).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool {
		status, page := fetch(t, f.http.URL+"/pods/team-a/tj-node-0-0")
		return status == http.StatusOK && strings.Contains(page, `href="`+path+`"`)
	})
}

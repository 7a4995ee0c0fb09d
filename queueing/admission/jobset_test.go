package admission

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// jobSetPod is a gated pod of Job jobIndex of replicated job rj (replicas Jobs) of JobSet
// "train", with its completion index (-1: none, as in a NonIndexed Job).
func jobSetPod(name, plan, rj string, replicas, jobIndex, index int) *corev1.Pod {
	pod := gatedPod(name, plan, index)
	pod.OwnerReferences[0].Name = fmt.Sprintf("train-%s-%d", rj, jobIndex)
	pod.OwnerReferences[0].UID = types.UID(fmt.Sprintf("job-%s-%d-uid", rj, jobIndex))
	pod.Labels = map[string]string{
		labelJobSetUID:         "jobset-uid",
		labelReplicatedJob:     rj,
		labelReplicatedJobSize: fmt.Sprint(replicas),
		labelJobIndex:          fmt.Sprint(jobIndex),
	}
	return pod
}

func TestPodPinnerJobSet(t *testing.T) {
	// Replicated job "workers": 2 Jobs of 2 pods, one pod set of 4.
	const plan = "r1-n1,r1-n2,r2-n1,r2-n2"
	t.Run("a pod's slot is its job index times the pods of a Job plus its completion index", func(t *testing.T) {
		c := lab(t,
			jobSetPod("w-0-0", plan, "workers", 2, 0, 0), jobSetPod("w-0-1", plan, "workers", 2, 0, 1),
			jobSetPod("w-1-0", plan, "workers", 2, 1, 0), jobSetPod("w-1-1", plan, "workers", 2, 1, 1))
		want := map[string]string{"w-0-0": "r1-n1", "w-0-1": "r1-n2", "w-1-0": "r2-n1", "w-1-1": "r2-n2"}
		for name, node := range want {
			pod, err := pin(t, c, name)
			if err != nil {
				t.Fatalf("pod %s: %v", name, err)
			}
			if got := pod.Spec.NodeSelector[topology.LabelHostname]; got != node {
				t.Errorf("pod %s pinned to %q, want %s", name, got, node)
			}
		}
	})
	t.Run("pods without an index of the replicated job's Jobs take distinct slots", func(t *testing.T) {
		c := lab(t,
			jobSetPod("w-0-a", plan, "workers", 2, 0, -1), jobSetPod("w-0-b", plan, "workers", 2, 0, -1),
			jobSetPod("w-1-a", plan, "workers", 2, 1, -1), jobSetPod("w-1-b", plan, "workers", 2, 1, -1))
		seen := map[string]string{}
		for _, name := range []string{"w-0-a", "w-1-a", "w-0-b", "w-1-b"} {
			pod, err := pin(t, c, name)
			if err != nil {
				t.Fatalf("pod %s: %v", name, err)
			}
			node := pod.Spec.NodeSelector[topology.LabelHostname]
			if other, dup := seen[node]; dup || !strings.Contains(plan, node) {
				t.Errorf("pod %s pinned to %q (already %s's)", name, node, other)
			}
			seen[node] = name
		}
	})
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"a completion index beyond its Job's pods", jobSetPod("w-0-2", plan, "workers", 2, 0, 2), "outside the plan of 2 pods"},
		{"a job index beyond the replicas", jobSetPod("w-2-0", plan, "workers", 2, 2, 0), "jobset.sigs.k8s.io/job-index=\"2\" is outside the 2 replicas"},
		{"a plan that does not split into the Jobs", jobSetPod("w-0-0", plan, "workers", 3, 0, 0), "does not split into the 3 Jobs of replicated job workers"},
	} {
		t.Run(tc.name+" is an error and the pod stays gated", func(t *testing.T) {
			c := lab(t, tc.pod)
			pod, err := pin(t, c, tc.pod.Name)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to say %q", err, tc.want)
			}
			if !hasGate(pod) {
				t.Error("gate lifted for a pod without a slot")
			}
		})
	}
}

// A JobSet's Workload has a pod set per replicated job, with that job's pod template: the
// topology annotation of one replicated job keeps its pods, from all its Jobs, in one rack,
// and each pod is pinned to a distinct planned node of that rack.
func TestJobSetWorkloadKeepsAReplicatedJobInOneRack(t *testing.T) {
	wl := job("jobset-train", "workers", "driver")
	wl.Spec.PodSets[1].Count = 2
	delete(wl.Spec.PodSets[1].Template.Annotations, api.AnnotationRequiredTopology)
	c := lab(t, wl)
	got := reconcile(t, newReconciler(c), "jobset-train")
	if got.State != kueue.CheckStateReady {
		t.Fatalf("state %s: %s", got.State, got.Message)
	}
	var plan string
	for _, u := range got.PodSetUpdates {
		if u.Name == "workers" {
			plan = u.Annotations[api.AnnotationPlacement]
			if u.NodeSelector[api.LabelRack] == "" {
				t.Errorf("workers: node selector %v names no rack", u.NodeSelector)
			}
		}
	}
	if strings.Count(plan, ",") != 3 {
		t.Fatalf("workers placement %q, want 4 nodes", plan)
	}
	pods := map[string]*corev1.Pod{}
	for j := range 2 {
		for i := range 2 {
			pod := jobSetPod(fmt.Sprintf("w-%d-%d", j, i), plan, "workers", 2, j, i)
			pods[pod.Name] = pod
			if err := c.Create(t.Context(), pod); err != nil {
				t.Fatal(err)
			}
		}
	}
	nodes, racks := map[string]bool{}, map[string]bool{}
	for name := range pods {
		pod, err := pin(t, c, name)
		if err != nil {
			t.Fatalf("pod %s: %v", name, err)
		}
		node := pod.Spec.NodeSelector[topology.LabelHostname]
		nodes[node] = true
		racks[strings.SplitN(node, "-", 2)[0]] = true
	}
	if len(nodes) != 4 || len(racks) != 1 {
		t.Errorf("workers pinned to nodes %v in racks %v, want 4 nodes of one rack", nodes, racks)
	}
}

// trainingPod is a gated pod of PyTorchJob "pt" of replica type rt and index i.
func trainingPod(name, plan, rt string, i int) *corev1.Pod {
	pod := gatedPod(name, plan, -1)
	pod.OwnerReferences[0] = metav1.OwnerReference{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: "pt", UID: "pt-uid"}
	pod.Labels = map[string]string{labelReplicaType: rt, labelReplicaIndex: fmt.Sprint(i)}
	return pod
}

// A training operator's job has a pod set per replica type: a pod's slot is its replica
// index, and a master and a worker planned on the same node do not take each other's slot.
func TestPodPinnerTrainingOperator(t *testing.T) {
	c := lab(t,
		trainingPod("pt-master-0", "r1-n1", "master", 0),
		trainingPod("pt-worker-0", "r1-n1,r1-n2,r1-n3", "worker", 0),
		trainingPod("pt-worker-2", "r1-n1,r1-n2,r1-n3", "worker", 2),
		trainingPod("pt-worker-5", "r1-n1,r1-n2,r1-n3", "worker", 5))
	for name, node := range map[string]string{"pt-master-0": "r1-n1", "pt-worker-2": "r1-n3", "pt-worker-0": "r1-n1"} {
		pod, err := pin(t, c, name)
		if err != nil {
			t.Fatalf("pod %s: %v", name, err)
		}
		if got := pod.Spec.NodeSelector[topology.LabelHostname]; got != node {
			t.Errorf("pod %s pinned to %q, want %s", name, got, node)
		}
	}
	pod, err := pin(t, c, "pt-worker-5")
	if err == nil || !strings.Contains(err.Error(), `training.kubeflow.org/replica-index="5" outside the plan of 3 pods of replica type worker`) {
		t.Errorf("replica index beyond the plan: err = %v", err)
	}
	if !hasGate(pod) {
		t.Error("gate lifted for a pod without a slot")
	}
}

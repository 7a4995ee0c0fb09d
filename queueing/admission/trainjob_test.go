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

// trainJobPod is a gated pod of a TrainJob "tj" of the torch runtime: Trainer runs it as
// JobSet "tj" whose replicated job "node" is one Indexed Job of numNodes pods, so the pod
// carries the JobSet's labels (one replica, job index 0), its completion index and Trainer's
// ancestor label.
func trainJobPod(index int, plan string) *corev1.Pod {
	pod := gatedPod(fmt.Sprintf("tj-node-0-%d", index), plan, index)
	pod.OwnerReferences[0] = metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "tj-node-0", UID: types.UID("tj-node-0-uid")}
	pod.Labels = map[string]string{
		"jobset.sigs.k8s.io/jobset-name":              "tj",
		labelJobSetUID:                                "tj-jobset-uid",
		labelReplicatedJob:                            "node",
		labelReplicatedJobSize:                        "1",
		labelJobIndex:                                 "0",
		"trainer.kubeflow.org/trainjob-ancestor-step": "trainer",
	}
	return pod
}

// A TrainJob's Workload, as Kueue makes it, has a pod set per replicated job of the JobSet
// its runtime makes ("node": numNodes pods), with the runtime's pod template and the
// TrainJob's runtime patches merged in: gpudra.dev/required-topology there keeps all the
// nodes in one rack, and node i (its completion index) is pinned to slot i of the plan.
func TestTrainJobWorkloadKeepsItsNodesInOneRack(t *testing.T) {
	wl := job("trainjob-tj-7e8f9", "node")
	wl.OwnerReferences = []metav1.OwnerReference{{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Name: "tj", UID: "tj-uid"}}
	c := lab(t, wl)
	got := reconcile(t, newReconciler(c), wl.Name)
	if got.State != kueue.CheckStateReady {
		t.Fatalf("state %s: %s", got.State, got.Message)
	}
	if len(got.PodSetUpdates) != 1 || got.PodSetUpdates[0].Name != "node" {
		t.Fatalf("pod set updates %+v, want one for pod set node", got.PodSetUpdates)
	}
	update := got.PodSetUpdates[0]
	rack := update.NodeSelector[api.LabelRack]
	if rack == "" {
		t.Errorf("node selector %v names no rack", update.NodeSelector)
	}
	plan := strings.Split(update.Annotations[api.AnnotationPlacement], ",")
	if len(plan) != 4 {
		t.Fatalf("placement %v, want 4 nodes", plan)
	}
	for i := range plan {
		if err := c.Create(t.Context(), trainJobPod(i, strings.Join(plan, ","))); err != nil {
			t.Fatal(err)
		}
	}
	// Pinned out of order: each pod's slot is its completion index, not the order it came.
	for _, i := range []int{2, 0, 3, 1} {
		name := fmt.Sprintf("tj-node-0-%d", i)
		pod, err := pin(t, c, name)
		if err != nil {
			t.Fatalf("pod %s: %v", name, err)
		}
		if node := pod.Spec.NodeSelector[topology.LabelHostname]; node != plan[i] {
			t.Errorf("pod %s pinned to %q, want slot %d of the plan, %s", name, node, i, plan[i])
		}
		if !strings.HasPrefix(plan[i], rack+"-") {
			t.Errorf("planned node %s is outside rack %s", plan[i], rack)
		}
		if hasGate(pod) {
			t.Errorf("pod %s still gated", name)
		}
	}
}

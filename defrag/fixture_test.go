package defrag_test

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gpudra/gpudra/defrag"
	"github.com/gpudra/gpudra/defrag/defragtest"
	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/driver/simulated"
	"github.com/gpudra/gpudra/queueing/gang"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// lab builds a Cluster of 8-GPU H100 nodes and runs pods on it, each pod's claim
// allocated by the real allocator on the GPUs it is pinned to.
type lab struct {
	t  *testing.T
	st *allocation.State
	c  defrag.Cluster
}

var slicesByNode = map[string][]resourceapi.ResourceSlice{}

func newLab(t *testing.T, nodes ...string) *lab {
	t.Helper()
	classes, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	l := &lab{t: t}
	for _, c := range classes {
		l.c.Classes = append(l.c.Classes, *c)
	}
	for _, n := range nodes {
		if slicesByNode[n] == nil {
			_, sl, err := simulated.Slices("dgx-h100", n, driver.RenderOptions{NoGroups: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range sl {
				slicesByNode[n] = append(slicesByNode[n], *s)
			}
		}
		l.c.Slices = append(l.c.Slices, slicesByNode[n]...)
		l.c.Nodes = append(l.c.Nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"kubernetes.io/hostname": n}}})
	}
	l.st, _ = allocation.FromCluster(l.c.Classes, l.c.Slices, nil)
	return l
}

// run starts pod ns/name on node with a claim for gpus whole GPUs (milli 1000) or one share
// (milli < 1000), pinned to the GPU indices given; movable labels it gpudra.dev/movable.
func (l *lab) run(name, node string, gpus int, milli int64, pin []int, movable bool, labels ...string) *corev1.Pod {
	l.t.Helper()
	claim, pod, err := defragtest.Running(l.st, name, node, gpus, milli, pin, movable, int64(len(l.c.Claims)))
	if err != nil {
		l.t.Fatal(err)
	}
	l.c.Claims = append(l.c.Claims, *claim)
	for k := 0; k+1 < len(labels); k += 2 {
		pod.Labels[labels[k]] = labels[k+1]
	}
	l.c.Pods = append(l.c.Pods, *pod)
	return &l.c.Pods[len(l.c.Pods)-1]
}

// pdb adds a PodDisruptionBudget over the pods labelled app=app that allows the disruptions given.
func (l *lab) pdb(app string, allowed int32) {
	l.c.PDBs = append(l.c.PDBs, policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "pdb-" + app, Namespace: "team"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: new(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
		Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed},
	})
}

// scattered is four 8-GPU nodes with no node free for an 8-GPU gang: n1 runs two movable
// half-GPU shares on GPUs 0 and 1; n2–n4 each run a 4-GPU job that may not move and two
// movable half-GPU shares on GPUs 4 and 5.
func scattered(t *testing.T) *lab {
	l := newLab(t, "n1", "n2", "n3", "n4")
	l.run("s1a", "n1", 1, 500, []int{0}, true)
	l.run("s1b", "n1", 1, 500, []int{1}, true)
	for _, n := range []string{"n2", "n3", "n4"} {
		l.run("train-"+n, n, 4, 1000, []int{0, 1, 2, 3}, false)
		l.run(fmt.Sprintf("s%sa", n[1:]), n, 1, 500, []int{4}, true)
		l.run(fmt.Sprintf("s%sb", n[1:]), n, 1, 500, []int{5}, true)
	}
	return l
}

// gang8 is a pending workload of one pod asking for 8 whole GPUs.
func gang8(pods int) *defrag.Workload {
	spec := resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpus", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: api.DeviceClassGPU, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 8,
	}}}}}
	return &defrag.Workload{Name: "team/big", PodSets: []gang.PodSet{{Name: "workers", Count: pods, Claims: []resourceapi.ResourceClaimSpec{spec}}}}
}

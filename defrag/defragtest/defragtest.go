// Package defragtest makes the running pods and allocated claims that defragmentation's tests
// plan around.
package defragtest

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/driver/simulated"
	"github.com/gpudra/gpudra/sim"
	"github.com/gpudra/gpudra/topology/placement"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// Cluster is the DeviceClasses gpudra ships, and nodes of the simulated profile with the
// ResourceSlices their plugin publishes, as API objects, with the allocation state over them.
func Cluster(profile string, nodes ...string) ([]client.Object, *allocation.State, error) {
	classes, err := deployments.DeviceClasses()
	if err != nil {
		return nil, nil, err
	}
	var objs []client.Object
	var cls []resourceapi.DeviceClass
	for _, c := range classes {
		objs = append(objs, c)
		cls = append(cls, *c)
	}
	var all []resourceapi.ResourceSlice
	for _, n := range nodes {
		_, sl, err := simulated.Slices(profile, n, driver.RenderOptions{})
		if err != nil {
			return nil, nil, err
		}
		for _, s := range sl {
			objs = append(objs, s)
			all = append(all, *s)
		}
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"kubernetes.io/hostname": n}}})
	}
	st, _ := allocation.FromCluster(cls, all, nil)
	return objs, st, nil
}

// Running is pod team/name running on node (labelled app=name, and gpudra.dev/movable=true
// when movable) with its claim team/<name>-gpu for gpus whole GPUs (milli 1000) or one share
// (milli < 1000), allocated from st on the GPU indices pin. seq tells the claims pinned in
// one test apart.
func Running(st *allocation.State, name, node string, gpus int, milli int64, pin []int, movable bool, seq int64) (*resourceapi.ResourceClaim, *corev1.Pod, error) {
	pp := &placement.Pod{Name: name, GPUs: gpus, GPUMilli: milli}
	pinned, err := sim.Claim(pp, pin, seq)
	if err != nil {
		return nil, nil, err
	}
	results, err := st.AllocateAndCommit(context.Background(), node, pinned)
	if err != nil {
		return nil, nil, fmt.Errorf("pod %s on %s GPUs %v: %w", name, node, pin, err)
	}
	claim, _ := sim.Claim(pp, nil, 0) // the spec as the user wrote it: no pin
	claim.ObjectMeta = metav1.ObjectMeta{Namespace: "team", Name: name + "-gpu", UID: types.UID("claim-" + name)}
	claim.Status.Allocation = &results[0]
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team", Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{NodeName: node, ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: new("gpu")}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: new(claim.Name)}}},
	}
	if movable {
		pod.Labels[api.LabelMovable] = "true"
	}
	return claim, pod, nil
}

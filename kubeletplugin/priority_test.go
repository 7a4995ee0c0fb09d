package kubeletplugin_test

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

// pod is a pod with the priority admission resolved from its PriorityClass (nil: none).
func priorityPod(name string, priority *int32) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("pod-" + name)},
		Spec: corev1.PodSpec{Priority: priority}}
}

func reservedFor(c *resourceapi.ResourceClaim, pods ...*corev1.Pod) *resourceapi.ResourceClaim {
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
	}
	return c
}

// With --share-priority-threshold, a share whose config leaves priority unset takes its pods'
// priority: what HAMi-core and MPS then see in the container.
func TestSharePriorityFollowsThePodsPriorityClass(t *testing.T) {
	const hami = "/opt/hami/libvgpu.so"
	guaranteed := "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nlimits: {policy: Guaranteed}"
	inference := priorityPod("inference", ptr.To[int32](1000))
	batch := priorityPod("batch", nil)
	lowClass := priorityPod("nightly", ptr.To[int32](999))
	// A pod of the same name as one the claim was reserved for, but another pod (recreated).
	stale := priorityPod("replaced", ptr.To[int32](5000))
	stale.UID = "another-uid"
	staleRef := priorityPod("replaced", nil)
	tests := []struct {
		name, vgpu, compute, config string
		threshold                   *int32
		pods                        []*corev1.Pod // the claim is reserved for these
		wantEnv                     map[string]string
		absent                      []string
	}{
		{name: "a pod at the threshold is High under HAMi-core", vgpu: hami, compute: "30", config: guaranteed, threshold: ptr.To[int32](1000), pods: []*corev1.Pod{inference},
			wantEnv: map[string]string{"CUDA_TASK_PRIORITY": "0", "GPUDRA_SHARE_PRIORITY_0": "High"}},
		{name: "a pod without a PriorityClass is Low under HAMi-core", vgpu: hami, compute: "30", config: guaranteed, threshold: ptr.To[int32](1000), pods: []*corev1.Pod{batch},
			wantEnv: map[string]string{"CUDA_TASK_PRIORITY": "1", "GPUDRA_SHARE_PRIORITY_0": "Low"}},
		{name: "a pod below the threshold is a below-normal MPS client", compute: "20", threshold: ptr.To[int32](1000), pods: []*corev1.Pod{lowClass},
			wantEnv: map[string]string{"CUDA_MPS_CLIENT_PRIORITY": "1", "GPUDRA_SHARE_PRIORITY_0": "Low", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "20"}},
		{name: "a claim shared by pods takes the highest", compute: "20", threshold: ptr.To[int32](1000), pods: []*corev1.Pod{batch, inference},
			wantEnv: map[string]string{"GPUDRA_SHARE_PRIORITY_0": "High", "CUDA_MPS_CLIENT_PRIORITY": "0"}},
		{name: "a configured priority wins over the pod's", vgpu: hami, compute: "20", threshold: ptr.To[int32](1000), pods: []*corev1.Pod{inference},
			config:  "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nlimits: {priority: Low}",
			wantEnv: map[string]string{"CUDA_TASK_PRIORITY": "1", "GPUDRA_SHARE_PRIORITY_0": "Low"}},
		{name: "BestEffort stays Low whatever the pod", vgpu: hami, compute: "0", threshold: ptr.To[int32](1000), pods: []*corev1.Pod{inference},
			config:  "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nlimits: {policy: BestEffort}",
			wantEnv: map[string]string{"CUDA_TASK_PRIORITY": "1"}},
		{name: "a pod replaced under the same name does not count", vgpu: hami, compute: "20", threshold: ptr.To[int32](1000), pods: []*corev1.Pod{staleRef},
			wantEnv: map[string]string{"CUDA_TASK_PRIORITY": "1"}},
		{name: "without the threshold the mechanism's normal priority", vgpu: hami, compute: "30", config: guaranteed, pods: []*corev1.Pod{inference},
			absent: []string{"CUDA_TASK_PRIORITY", "GPUDRA_SHARE_PRIORITY_0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objects := []runtime.Object{inference, batch, lowClass, stale}
			client := fake.NewClientset(objects...)
			n := newNode(t, "dgx-h100", func(c *plugin.Config) {
				c.VGPULibrary, c.SharePriorityThreshold, c.Client = tc.vgpu, tc.threshold, client
			})
			c := reservedFor(n.allocate(shareClaim("10Gi", tc.compute, tc.config)), tc.pods...)
			mustPrepare(t, n.newDriver(nil), c)
			got := env(n.spec(c).Devices[0].ContainerEdits)
			checkEnv(t, got, tc.wantEnv, tc.absent)
		})
	}
}

// The pods are read only for a share that needs their priority, once per claim, and a read
// that fails fails the prepare (the kubelet retries) instead of guessing Low.
func TestSharePriorityReadsThePodsOnlyWhenNeeded(t *testing.T) {
	client := fake.NewClientset(priorityPod("inference", ptr.To[int32](1000)))
	gets := 0
	fail := false
	client.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets++
		if fail {
			return true, nil, errors.New("the API server is unreachable")
		}
		return false, nil, nil
	})
	n := newNode(t, "dgx-h100", func(c *plugin.Config) { c.SharePriorityThreshold, c.Client = ptr.To[int32](1), client })
	d := n.newDriver(nil)
	pod := priorityPod("inference", nil)
	mustPrepare(t, d, reservedFor(n.allocate(wholeGPU), pod))
	mustPrepare(t, d, reservedFor(n.allocate(shareClaim("1Gi", "10", "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nlimits: {priority: High}")), pod))
	if gets != 0 {
		t.Errorf("a whole GPU and a share with a priority read %d pods, want none", gets)
	}
	mustPrepare(t, d, reservedFor(n.allocate(shareClaim("1Gi", "10", "")), pod))
	if gets != 1 {
		t.Errorf("a share without a priority read %d pods, want 1", gets)
	}
	fail = true
	_, err := prepare(t, d, reservedFor(n.allocate(shareClaim("1Gi", "10", "")), pod))
	if err == nil || !strings.Contains(err.Error(), "reading pod default/inference") || !strings.Contains(err.Error(), "limits.priority is unset") {
		t.Fatalf("prepare error %v, want one naming the pod it could not read", err)
	}
}

//go:build e2e

package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// TestControllerUpdatesOnlyPinning: with the controller's token, the policy shipped with its
// RBAC (gpudra-controller-pod-pinning) lets it update a pod only to pin it to a node planned
// for it; changing the image of any pod, gated or not, is refused by the real API server.
func TestControllerUpdatesOnlyPinning(t *testing.T) {
	inLane(t, clusterLane)
	if !state.Kueue {
		labLacks(t, "Kueue: the controller's RBAC and policy are installed with gpudra-controller (labs with Kueue)")
	}
	tr, err := client.CoreV1().ServiceAccounts("gpudra").CreateToken(t.Context(), "gpudra-controller", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cc := rest.AnonymousClientConfig(cfg)
	cc.BearerToken = tr.Status.Token
	as, err := kubernetes.NewForConfig(cc)
	if err != nil {
		t.Fatal(err)
	}
	plan := []string{state.Nodes[0].Name, state.Nodes[1].Name}
	// The running controller would pin these pods itself; a completion index it cannot
	// read keeps it off them (it reports the pod and retries), and the policy does not
	// look at that annotation.
	gated := func(name string) *corev1.Pod {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
			Annotations: map[string]string{api.AnnotationPlacement: strings.Join(plan, ","), "batch.kubernetes.io/job-completion-index": "none"}},
			Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: api.SchedulingGate}},
				Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
		created, err := client.CoreV1().Pods("default").Create(t.Context(), pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = client.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		})
		return created
	}
	pin := func(pod *corev1.Pod, slot int) {
		pod.Spec.NodeSelector = map[string]string{topology.LabelHostname: plan[slot]}
		pod.Labels = map[string]string{api.LabelPinnedSlot: strconv.Itoa(slot)}
		pod.Spec.SchedulingGates = nil
	}
	for _, tc := range []struct {
		name   string
		change func(*corev1.Pod)
		want   string
	}{
		{"image", func(p *corev1.Pod) { pin(p, 1); p.Spec.Containers[0].Image = "registry.k8s.io/pause:3.9" }, "changes only spec.schedulingGates and spec.nodeSelector of a pod, not containers"},
		{"node", func(p *corev1.Pod) { pin(p, 1); p.Spec.NodeSelector[topology.LabelHostname] = "control-plane" }, "to one of its planned nodes"},
		{"annotation", func(p *corev1.Pod) { pin(p, 0); p.Annotations["example.com/x"] = "y" }, "does not change a pod's annotations"},
	} {
		pod := gated("e2e-pin-" + tc.name)
		tc.change(pod)
		if _, err := as.CoreV1().Pods("default").Update(t.Context(), pod, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("the controller's token changed a pod's %s: err = %v, want it refused saying %q", tc.name, err, tc.want)
		}
	}
	pod := gated("e2e-pin-ok")
	pin(pod, 1)
	if _, err := as.CoreV1().Pods("default").Update(t.Context(), pod, metav1.UpdateOptions{}); err != nil {
		t.Errorf("the controller's token may not pin a gated pod to its planned node: %v", err)
	}
}

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/lab"
)

// TestDeletedPodFreesItsDeviceForAPendingPod pins two pods to the same single GPU (one node,
// one index): the second stays unschedulable while the first holds the GPU, and gets it once
// the first is deleted.
func TestDeletedPodFreesItsDeviceForAPendingPod(t *testing.T) {
	inLane(t, clusterLane)
	ns := namespace(t, "e2e-realloc")
	node, index := freeGPU(t)
	apply(t, fmt.Sprintf(`
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: that-gpu, namespace: %[1]s}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.gpudra.dev
          selectors:
          - cel:
              expression: device.attributes["gpu.gpudra.dev"].index == %[3]s
`+podYAML("first"), ns, node, index))
	eventually(t, 2*time.Minute, "the first pod runs", podRunning(ns, "first"))
	// The second pod only once the first holds the GPU: created together, the scheduler may
	// take the second first (its claim can be made from the template before the first's).
	apply(t, fmt.Sprintf(podYAML("second"), ns, node))
	claimOf := func(pod string) string {
		p, err := client.CoreV1().Pods(ns).Get(t.Context(), pod, metav1.GetOptions{})
		if err != nil || len(p.Status.ResourceClaimStatuses) == 0 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
			t.Fatalf("pod %s has no generated claim: %v", pod, err)
		}
		return *p.Status.ResourceClaimStatuses[0].ResourceClaimName
	}
	firstDevices, err := allocated(t.Context(), ns, claimOf("first"))
	if err != nil || len(firstDevices) != 1 {
		t.Fatalf("first pod's claim: %v %v", firstDevices, err)
	}
	// The scheduler tried the second pod and found no device: an observed outcome, not a sleep.
	eventually(t, time.Minute, "the second pod is unschedulable while the GPU is held", func(ctx context.Context) error {
		p, err := client.CoreV1().Pods(ns).Get(ctx, "second", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Spec.NodeName != "" {
			return fmt.Errorf("second pod was bound to %s while the GPU is held", p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return nil
			}
		}
		return fmt.Errorf("second pod not yet found unschedulable")
	})

	if err := client.CoreV1().Pods(ns).Delete(t.Context(), "first", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the second pod runs once the first is deleted", podRunning(ns, "second"))
	secondDevices, err := allocated(t.Context(), ns, claimOf("second"))
	if err != nil {
		t.Fatal(err)
	}
	if len(secondDevices) != 1 || secondDevices[0].Pool != firstDevices[0].Pool || secondDevices[0].Device != firstDevices[0].Device {
		t.Errorf("second pod got %v, want the first pod's device %s/%s", secondDevices, firstDevices[0].Pool, firstDevices[0].Device)
	}
}

func podYAML(name string) string {
	return `
---
apiVersion: v1
kind: Pod
metadata: {name: ` + name + `, namespace: %[1]s}
spec:
  nodeSelector: {kubernetes.io/hostname: %[2]s}
  resourceClaims: [{name: gpu, resourceClaimTemplateName: that-gpu}]
  containers:
  - name: c
    image: registry.k8s.io/pause:3.10
    resources: {claims: [{name: gpu}]}
`
}

// freeGPU picks a whole GPU on a node where no claim holds anything (a share, MIG slice or
// group of a GPU makes the whole GPU unavailable too), and returns its node and index attribute.
func freeGPU(t *testing.T) (node, index string) {
	t.Helper()
	claims, err := lab.ListClaims(t.Context(), client, metav1.NamespaceAll)
	if err != nil {
		t.Fatal(err)
	}
	busy := map[string]bool{}
	for _, c := range claims {
		if c.Allocated {
			busy[c.Node] = true
		}
	}
	devices := publishedDevices(t.Context(), t)
	keys := make([]string, 0, len(devices))
	for k := range devices {
		keys = append(keys, k)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(keys)))
	for _, k := range keys {
		d := devices[k]
		node := k[:len(k)-len(d.Name)-1]
		if lab.DeviceType(d) == "gpu" && !busy[node] && stringAttr(d, "index") != "" {
			return node, stringAttr(d, "index")
		}
	}
	t.Fatal("no node without allocated claims in the lab")
	return "", ""
}

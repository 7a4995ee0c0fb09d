//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/kubeletplugin"
	"github.com/gpudra/gpudra/lab"
)

// TestPreparedClaimShowsReadyInItsStatus: once a pod's claim is prepared on the real node
// (the lab's one kubelet that prepares claims), the plugin writes a Ready condition on its
// device's status.devices entry. That it does so with usage sampling off is the kubelet
// plugin's unit test (TestReadyIsWrittenWithUsageOff).
func TestPreparedClaimShowsReadyInItsStatus(t *testing.T) {
	inLane(t, realNodeLane)
	node := realNode(t)
	ns := namespace(t, "e2e-claim-status")
	ctx := t.Context()
	if _, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, claimOf(ns, "one-gpu", "gpu.gpudra.dev", nil, ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := lab.RealNodePod(ns, "holder", node, []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("one-gpu")}})
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the claim's pod runs", podRunning(ns, "holder"))
	// The plugin writes the claims' status every 30 s.
	eventually(t, 2*time.Minute, "the claim's device is Ready in its status", func(ctx context.Context) error {
		c, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, "one-gpu", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, s := range c.Status.Devices {
			if s.Driver != api.DriverName {
				continue
			}
			r := meta.FindStatusCondition(s.Conditions, kubeletplugin.ConditionReady)
			if r == nil || r.Status != metav1.ConditionTrue || r.Reason != kubeletplugin.ReasonPrepared {
				return fmt.Errorf("device %s/%s has conditions %+v, want Ready True (%s)", s.Pool, s.Device, s.Conditions, kubeletplugin.ReasonPrepared)
			}
			return nil
		}
		return fmt.Errorf("status.devices has no %s entry: %+v", api.DriverName, c.Status.Devices)
	})
}

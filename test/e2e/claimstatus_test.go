//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/kubeletplugin"
)

// TestPreparedClaimShowsReadyInItsStatus: once a pod's claim is prepared, the plugin
// writes a Ready condition on its device's status.devices entry, whether it samples the
// claims' usage or not.
func TestPreparedClaimShowsReadyInItsStatus(t *testing.T) {
	ns := namespace(t, "e2e-claim-status")
	apply(t, `
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: one-gpu, namespace: `+ns+`}
spec:
  devices:
    requests:
    - {name: gpu, exactly: {deviceClassName: gpu.gpudra.dev}}
---
apiVersion: v1
kind: Pod
metadata: {name: holder, namespace: `+ns+`}
spec:
  resourceClaims: [{name: gpu, resourceClaimName: one-gpu}]
  containers:
  - name: main
    image: registry.k8s.io/pause:3.10
    resources:
      requests: {cpu: 10m}
      claims: [{name: gpu}]
`)
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

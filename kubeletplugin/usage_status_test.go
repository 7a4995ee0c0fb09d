package kubeletplugin_test

import (
	"context"
	"encoding/json"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	plugin "github.com/gpudra/gpudra/kubeletplugin"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// The plugin writes a claim's status by server-side apply as its own field manager: its
// driver's entries only, each with a Ready condition, leaving another driver's entry of
// the same claim as that driver wrote it.
func TestClaimStatusIsAppliedWithAReadyCondition(t *testing.T) {
	u := newUsageNode(t)
	d := u.newDriver(nil)
	share := u.allocate(shareClaim("4Gi", "30", ""))
	mustPrepare(t, d, share)
	const podUID = types.UID("5a7b3c1d-9e8f-4a2b-8c6d-1e2f3a4b5c6d")
	u.runPod(t, share, "trainer", podUID)

	// Another driver's device in the same claim, with the status its driver wrote.
	ctx := context.Background()
	claims := u.client.ResourceV1().ResourceClaims(share.Namespace)
	c, err := claims.Get(ctx, share.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other := resourceapi.AllocatedDeviceStatus{Driver: "nic.example.com", Pool: nodeName, Device: "eth1",
		Data: &runtime.RawExtension{Raw: []byte(`{"link":"up"}`)}}
	c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
		resourceapi.DeviceRequestAllocationResult{Request: "nic", Driver: other.Driver, Pool: other.Pool, Device: other.Device})
	c.Status.Devices = []resourceapi.AllocatedDeviceStatus{other}
	if _, err := claims.UpdateStatus(ctx, c, metav1.UpdateOptions{FieldManager: "nic-driver"}); err != nil {
		t.Fatal(err)
	}
	u.client.ClearActions()

	plugin.WriteUsageStatus(ctx, d)

	var applies []k8stesting.PatchActionImpl
	for _, a := range u.client.Actions() {
		if p, ok := a.(k8stesting.PatchActionImpl); ok && p.GetResource().Resource == "resourceclaims" && p.GetSubresource() == "status" {
			applies = append(applies, p)
		} else if a.GetVerb() == "update" {
			t.Errorf("the plugin wrote the claim with %s %s/%s; want a server-side apply", a.GetVerb(), a.GetResource().Resource, a.GetSubresource())
		}
	}
	if len(applies) != 1 {
		t.Fatalf("%d status patches, want one apply", len(applies))
	}
	p := applies[0]
	if p.GetPatchType() != types.ApplyPatchType || p.PatchOptions.FieldManager != plugin.StatusFieldManager || p.PatchOptions.Force == nil || !*p.PatchOptions.Force {
		t.Errorf("status written as %s by %q (force %v), want a forced apply by %q", p.GetPatchType(), p.PatchOptions.FieldManager, p.PatchOptions.Force, plugin.StatusFieldManager)
	}
	var patch resourceapi.ResourceClaim
	if err := json.Unmarshal(p.GetPatch(), &patch); err != nil {
		t.Fatalf("apply patch %s: %v", p.GetPatch(), err)
	}
	if len(patch.Status.Devices) != 1 || patch.Status.Devices[0].Driver != api.DriverName {
		t.Errorf("apply patch has status.devices %+v, want only the %s entry", patch.Status.Devices, api.DriverName)
	}

	c, err = claims.Get(ctx, share.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mine, theirs *resourceapi.AllocatedDeviceStatus
	for k := range c.Status.Devices {
		switch c.Status.Devices[k].Driver {
		case api.DriverName:
			mine = &c.Status.Devices[k]
		case other.Driver:
			theirs = &c.Status.Devices[k]
		}
	}
	if theirs == nil || theirs.Data == nil || string(theirs.Data.Raw) != `{"link":"up"}` {
		t.Errorf("the other driver's entry became %+v, want it kept as written", theirs)
	}
	if mine == nil {
		t.Fatalf("status.devices = %+v, want the share's entry", c.Status.Devices)
	}
	ready := meta.FindStatusCondition(mine.Conditions, plugin.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionTrue || ready.Reason != plugin.ReasonPrepared || ready.LastTransitionTime.IsZero() {
		t.Errorf("the share's conditions = %+v, want Ready True (%s) with a transition time", mine.Conditions, plugin.ReasonPrepared)
	}
	var du plugin.DeviceUsage
	if mine.Data == nil || json.Unmarshal(mine.Data.Raw, &du) != nil || du.Usage.MemoryLimitBytes != 4<<30 {
		t.Errorf("the share's entry data = %v, want its usage", mine.Data)
	}
}

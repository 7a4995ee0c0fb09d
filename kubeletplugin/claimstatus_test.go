package kubeletplugin_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	plugin "github.com/gpudra/gpudra/kubeletplugin"
	"github.com/gpudra/gpudra/kubeletplugin/usage"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// The plugin writes a claim's status as its own field manager: its driver's entries, each
// with a Ready condition, leaving another driver's entry of the same claim as that driver
// wrote it.
func TestClaimStatusIsWrittenWithAReadyCondition(t *testing.T) {
	u := newUsageNode(t)
	d := u.newDriver(nil)
	share := u.allocate(shareClaim("4Gi", "30", ""))
	mustPrepare(t, d, share)
	const podUID = types.UID("5a7b3c1d-9e8f-4a2b-8c6d-1e2f3a4b5c6d")
	u.runPod(t, share, "trainer", podUID)

	// Another driver's device in the same claim, with the status its driver wrote, its data
	// spelled as that driver spelled it.
	ctx := context.Background()
	claims := u.client.ResourceV1().ResourceClaims(share.Namespace)
	c, err := claims.Get(ctx, share.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other := resourceapi.AllocatedDeviceStatus{Driver: "nic.example.com", Pool: nodeName, Device: "eth1",
		Data: &runtime.RawExtension{Raw: []byte(`{"link": "up", "ip": "10.0.0.1"}`)}}
	c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
		resourceapi.DeviceRequestAllocationResult{Request: "nic", Driver: other.Driver, Pool: other.Pool, Device: other.Device})
	c.Status.Devices = []resourceapi.AllocatedDeviceStatus{other}
	if _, err := claims.UpdateStatus(ctx, c, metav1.UpdateOptions{FieldManager: "nic-driver"}); err != nil {
		t.Fatal(err)
	}
	u.client.ClearActions()

	plugin.WriteClaimStatus(ctx, d)

	var updates []k8stesting.UpdateActionImpl
	for _, a := range u.client.Actions() {
		if up, ok := a.(k8stesting.UpdateActionImpl); ok && up.GetResource().Resource == "resourceclaims" && up.GetSubresource() == "status" {
			updates = append(updates, up)
		} else if a.GetVerb() == "patch" || a.GetVerb() == "update" {
			t.Errorf("the plugin wrote the claim with %s %s/%s; want one status update", a.GetVerb(), a.GetResource().Resource, a.GetSubresource())
		}
	}
	if len(updates) != 1 {
		t.Fatalf("%d status updates, want one", len(updates))
	}
	if fm := updates[0].UpdateOptions.FieldManager; fm != plugin.StatusFieldManager {
		t.Errorf("status written by %q, want %q", fm, plugin.StatusFieldManager)
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
	if theirs == nil || theirs.Data == nil || string(theirs.Data.Raw) != string(other.Data.Raw) {
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

// The plugin's status write leaves the claim's allocation as the scheduler wrote it, its
// opaque parameters spelled as their author spelled them (spaces, key order): the API
// server refuses a status write that changes the allocation, byte for byte, from a writer
// without resourceclaims/binding.
func TestClaimStatusWriteLeavesTheAllocationAsWritten(t *testing.T) {
	u := newUsageNode(t)
	d := u.newDriver(nil)
	share := u.allocate(shareClaim("4Gi", "30", shareConfig("limits: {policy: Guaranteed, computeLimit: 60}")))
	// As a client that writes its own JSON sends it, not in the canonical form (compact,
	// keys sorted) that a server-side apply turns every embedded object into.
	const spelled = `{"apiVersion": "gpu.gpudra.dev/v1alpha1", "kind": "GpuConfig", "limits": {"policy": "Guaranteed", "computeLimit": 60}}`
	configs := share.Status.Allocation.Devices.Config
	if len(configs) != 1 || configs[0].Opaque == nil || len(share.Spec.Devices.Config) != 1 {
		t.Fatalf("allocation config %+v, want the claim's one opaque config", configs)
	}
	configs[0].Opaque.Parameters = runtime.RawExtension{Raw: []byte(spelled)}
	share.Spec.Devices.Config[0].Opaque.Parameters = runtime.RawExtension{Raw: []byte(spelled)}
	mustPrepare(t, d, share)
	u.runPod(t, share, "trainer", types.UID("0c5d6e7f-1a2b-4c3d-8e9f-a0b1c2d3e4f5"))

	ctx := context.Background()
	plugin.WriteClaimStatus(ctx, d)

	got, err := u.client.ResourceV1().ResourceClaims(share.Namespace).Get(ctx, share.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Devices) != 1 {
		t.Fatalf("status.devices = %+v, want the share's entry", got.Status.Devices)
	}
	if !apiequality.Semantic.DeepEqual(got.Status.Allocation, share.Status.Allocation) {
		var params string
		if c := got.Status.Allocation.Devices.Config; len(c) == 1 && c[0].Opaque != nil {
			params = string(c[0].Opaque.Parameters.Raw)
		}
		t.Errorf("the plugin's status write changed the claim's allocation (parameters now %s, were %s)", params, spelled)
	}
}

// With usage sampling off, the running plugin still writes the Ready condition of every
// prepared device of a claim, and no usage.
func TestReadyIsWrittenWithUsageOff(t *testing.T) {
	n := newNode(t, "dgx-h100")
	c := startPlugin(t, n, func(cfg *plugin.Config) {
		cfg.Usage = usage.Config{Disabled: true}
		cfg.StatusInterval = 20 * time.Millisecond
	})
	whole := n.allocate(gpuClaim("1", ""))
	ctx := context.Background()
	claims := c.client.ResourceV1().ResourceClaims(whole.Namespace)
	if _, err := claims.Create(ctx, whole, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mustPrepare(t, c.d, whole)

	var s resourceapi.AllocatedDeviceStatus
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got, err := claims.Get(ctx, whole.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Status.Devices) == 1 {
			s = got.Status.Devices[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status.devices = %+v 10 s after the prepare, want the GPU's entry", got.Status.Devices)
		}
	}
	if r := whole.Status.Allocation.Devices.Results[0]; s.Driver != api.DriverName || s.Pool != r.Pool || s.Device != r.Device {
		t.Errorf("status entry %s/%s/%s, want the allocated %s/%s/%s", s.Driver, s.Pool, s.Device, r.Driver, r.Pool, r.Device)
	}
	ready := meta.FindStatusCondition(s.Conditions, plugin.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionTrue || ready.Reason != plugin.ReasonPrepared {
		t.Errorf("the GPU's conditions = %+v, want Ready True (%s)", s.Conditions, plugin.ReasonPrepared)
	}
	if s.Data != nil {
		t.Errorf("the GPU's entry data = %s, want no usage with usage sampling off", s.Data.Raw)
	}
}

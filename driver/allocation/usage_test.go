package allocation_test

import (
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/driver/simulated"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// A node's usage, read from its own pools only, says of each of its devices what the
// cluster's usage says, whatever the mix of whole GPUs, shares and NVLink groups allocated
// on it and on the other nodes.
func TestNodeUsageAgreesWithTheClustersOnItsDevices(t *testing.T) {
	classes, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	nodes := []string{"n0", "n1", "n2"}
	var slices []*resourceapi.ResourceSlice
	for _, n := range nodes {
		_, s, err := simulated.Slices("dgx-h100", n, driver.RenderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		slices = append(slices, s...)
	}
	st := allocation.New(classes, slices)
	claim := func(i int, class string, count int64, capacity map[resourceapi.QualifiedName]resource.Quantity) *resourceapi.ResourceClaim {
		r := &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}
		if capacity != nil {
			r.Capacity = &resourceapi.CapacityRequirements{Requests: capacity}
		}
		name := fmt.Sprintf("c%d", i)
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID(name)},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: r}}}}}
	}
	share := map[resourceapi.QualifiedName]resource.Quantity{api.CapCompute: resource.MustParse("25"), api.CapMemory: resource.MustParse("20Gi")}
	// n0: two whole GPUs and two shares; n1: an NVLink group and a whole GPU; n2: nothing.
	for i, c := range []struct {
		node string
		cl   *resourceapi.ResourceClaim
	}{
		{"n0", claim(0, api.DeviceClassGPU, 2, nil)},
		{"n0", claim(1, api.DeviceClassShare, 1, share)},
		{"n0", claim(2, api.DeviceClassShare, 1, share)},
		{"n1", claim(3, api.DeviceClassNVLinkGroup, 1, nil)},
		{"n1", claim(4, api.DeviceClassGPU, 1, nil)},
	} {
		if _, err := st.AllocateAndCommit(t.Context(), c.node, c.cl); err != nil {
			t.Fatalf("claim %d on %s: %v", i, c.node, err)
		}
	}
	cluster := st.Usage()
	for _, n := range nodes {
		nodeUsage, inUse := st.NodeUsage(n), 0
		for _, sl := range st.Slices() {
			if sl.Spec.NodeName == nil || *sl.Spec.NodeName != n {
				continue
			}
			for _, dev := range sl.Spec.Devices {
				want := cluster.InUse(sl.Spec.Driver, sl.Spec.Pool.Name, dev)
				if got := nodeUsage.InUse(sl.Spec.Driver, sl.Spec.Pool.Name, dev); got != want {
					t.Errorf("%s %s: node usage says in use %v, the cluster's %v", n, dev.Name, got, want)
				}
				if want {
					inUse++
				}
			}
		}
		if (n == "n2") != (inUse == 0) {
			t.Errorf("%s: %d devices in use", n, inUse)
		}
	}
}

// BenchmarkNodeUsage: what the admission check pays to hold one node's free devices
// (a reservation whose planned devices the scheduler gave to another gang), against the
// whole cluster's usage it took before, on 512 DGX H100 nodes.
func BenchmarkNodeUsage(b *testing.B) {
	classes, err := deployments.DeviceClasses()
	if err != nil {
		b.Fatal(err)
	}
	var slices []*resourceapi.ResourceSlice
	for n := range 512 {
		_, s, err := simulated.Slices("dgx-h100", fmt.Sprintf("n%03d", n), driver.RenderOptions{})
		if err != nil {
			b.Fatal(err)
		}
		slices = append(slices, s...)
	}
	st := allocation.New(classes, slices)
	b.Run("cluster", func(b *testing.B) {
		for b.Loop() {
			st.Usage()
		}
	})
	b.Run("node", func(b *testing.B) {
		for b.Loop() {
			st.NodeUsage("n100")
		}
	})
}

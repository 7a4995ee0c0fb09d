package driver_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/driver/simulated"
)

// simInventory discovers a simulated node.
func simInventory(t testing.TB, profile, nodeName string) *driver.Inventory {
	t.Helper()
	inv, _, err := simulated.Slices(profile, nodeName, driver.RenderOptions{})
	if err != nil {
		t.Fatalf("%s: %v", profile, err)
	}
	return inv
}

// render renders an inventory's slices for a node.
func render(t testing.TB, inv *driver.Inventory, nodeName string, opts driver.RenderOptions) []*resourceapi.ResourceSlice {
	t.Helper()
	pool, err := driver.Render(inv, opts)
	if err != nil {
		t.Fatal(err)
	}
	return pool.ResourceSlices(nodeName, 1)
}

// simNode discovers a simulated node and renders the slices its plugin publishes with
// dynamic MIG.
func simNode(t testing.TB, profile, nodeName string) (*driver.Inventory, []*resourceapi.ResourceSlice) {
	t.Helper()
	inv := simInventory(t, profile, nodeName)
	// Dynamic MIG publishes every kind of device at once, so one node can prove that
	// whole, shared, MIG and grouped use of a GPU exclude each other.
	return inv, render(t, inv, nodeName, driver.RenderOptions{MIG: driver.MIGDynamic})
}

// newState is a cluster with the shipped DeviceClasses and the given slices.
func newState(t testing.TB, slices ...[]*resourceapi.ResourceSlice) *allocation.State {
	t.Helper()
	classes, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	var all []*resourceapi.ResourceSlice
	for _, s := range slices {
		all = append(all, s...)
	}
	return allocation.New(classes, all)
}

var claimSeq atomic.Int64

// claim parses a ResourceClaim spec written as a user writes it, with the API server's
// defaults applied.
func claim(t testing.TB, specYAML string) *resourceapi.ResourceClaim {
	t.Helper()
	spec, err := allocation.ParseClaimSpec([]byte(specYAML))
	if err != nil {
		t.Fatalf("%v\n%s", err, specYAML)
	}
	n := claimSeq.Add(1)
	c := &resourceapi.ResourceClaim{Spec: spec}
	c.Name = fmt.Sprintf("claim-%d", n)
	c.Namespace = "default"
	c.UID = types.UID(fmt.Sprintf("uid-%d", n))
	return c
}

// allocate allocates one claim on the node and commits it; it returns the sorted device
// names, or nil when the claim does not fit.
func allocate(t testing.TB, st *allocation.State, nodeName, specYAML string) []string {
	t.Helper()
	res, err := st.AllocateAndCommit(context.Background(), nodeName, claim(t, specYAML))
	if errors.Is(err, allocation.ErrUnsatisfiable) {
		return nil
	}
	if err != nil {
		t.Fatalf("allocate: %v", err)
	}
	return allocation.SortedDevices(res[0])
}

func mustAllocate(t testing.TB, st *allocation.State, nodeName, specYAML string) []string {
	t.Helper()
	got := allocate(t, st, nodeName, specYAML)
	if got == nil {
		t.Fatalf("claim did not fit on %s:\n%s", nodeName, specYAML)
	}
	return got
}

func mustNotFit(t testing.TB, st *allocation.State, nodeName, why, specYAML string) {
	t.Helper()
	if got := allocate(t, st, nodeName, specYAML); got != nil {
		t.Fatalf("%s: claim was allocated %v, want unsatisfiable", why, got)
	}
}

// Claims as users write them.
const (
	wholeGPU = `
devices:
  requests:
  - name: gpu
    exactly:
      deviceClassName: gpu.gpudra.dev
`
	fourCliqueGPUs = `
devices:
  requests:
  - name: gpus
    exactly:
      deviceClassName: gpu.gpudra.dev
      count: 4
  constraints:
  - matchAttribute: gpu.gpudra.dev/nvlinkClique
`
	fourGPUGroup = `
devices:
  requests:
  - name: tp
    exactly:
      deviceClassName: nvlink-group.gpudra.dev
      selectors:
      - cel:
          expression: device.attributes["gpu.gpudra.dev"].gpuCount == 4
`
	doubleLinkPair = `
devices:
  requests:
  - name: pair
    exactly:
      deviceClassName: nvlink-group.gpudra.dev
      selectors:
      - cel:
          expression: >-
            device.attributes["gpu.gpudra.dev"].gpuCount == 2 &&
            device.attributes["gpu.gpudra.dev"].nvlinkMinLinks >= 2
`
)

func gpuByIndex(i int) string {
	return fmt.Sprintf(`
devices:
  requests:
  - name: gpu
    exactly:
      deviceClassName: gpu.gpudra.dev
      selectors:
      - cel:
          expression: device.attributes["gpu.gpudra.dev"].index == %d
`, i)
}

func migOn(gpu int, profile string) string {
	return fmt.Sprintf(`
devices:
  requests:
  - name: mig
    exactly:
      deviceClassName: mig.gpudra.dev
      selectors:
      - cel:
          expression: >-
            device.attributes["gpu.gpudra.dev"].migProfile == %q &&
            device.attributes["gpu.gpudra.dev"].parentIndex == %d
`, profile, gpu)
}

func shareOn(gpu int, memory, compute string) string {
	return fmt.Sprintf(`
devices:
  requests:
  - name: share
    exactly:
      deviceClassName: gpu-share.gpudra.dev
      selectors:
      - cel:
          expression: device.attributes["gpu.gpudra.dev"].index == %d
      capacity:
        requests:
          memory: %s
          compute: %q
`, gpu, memory, compute)
}

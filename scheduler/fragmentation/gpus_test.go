package fragmentation

import (
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/simulated"
	"github.com/gpudra/gpudra/sim"
	"github.com/gpudra/gpudra/topology/placement"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// TestLayoutsFollowSliceChanges: the GPUs a node has follow its slices when the informer
// hands out a changed slice or drops one, whatever order the slices are listed in.
func TestLayoutsFollowSliceChanges(t *testing.T) {
	var listed []*resourceapi.ResourceSlice
	for _, n := range []placement.NodeSpec{{Name: "a", GPUs: 4, Model: "V100M32"}, {Name: "b", GPUs: 2, Model: "V100M32"}} {
		rs, err := sim.Slices(n)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range rs {
			s.ResourceVersion = "1"
		}
		listed = append(listed, rs...)
	}
	var c layouts
	gpus := func(slices []*resourceapi.ResourceSlice) map[string]int {
		out := map[string]int{}
		for node, g := range c.gpusByNode(slices, nil, sets.New("a", "b")) {
			out[node] = len(g.free)
		}
		return out
	}
	if got := gpus(listed); got["a"] != 4 || got["b"] != 2 {
		t.Fatalf("GPUs %v, want a: 4, b: 2", got)
	}
	reversed := slices.Clone(listed)
	slices.Reverse(reversed)
	if got := gpus(reversed); got["a"] != 4 || got["b"] != 2 {
		t.Errorf("listed in another order: GPUs %v, want a: 4, b: 2", got)
	}
	// Node b's slices are replaced by ones of 4 GPUs (a new object, a new resourceVersion).
	rs, err := sim.Slices(placement.NodeSpec{Name: "b", GPUs: 4, Model: "V100M32"})
	if err != nil {
		t.Fatal(err)
	}
	var changed []*resourceapi.ResourceSlice
	for _, s := range listed {
		if s.Spec.NodeName == nil || *s.Spec.NodeName != "b" {
			changed = append(changed, s)
		}
	}
	for _, s := range rs {
		s.ResourceVersion = "2"
		changed = append(changed, s)
	}
	if got := gpus(changed); got["b"] != 4 {
		t.Errorf("after node b's slices changed: GPUs %v, want b: 4", got)
	}
	if got := gpus(changed[:len(changed)-len(rs)]); len(got) != 1 || got["a"] != 4 {
		t.Errorf("after node b's slices went: GPUs %v, want only a: 4", got)
	}
}

// On a node with an NVIDIA and an AMD GPU, a pod of one vendor's class sees that vendor's
// GPU only (its model and what is free of it); a pod of any vendor sees both.
func TestMixedNodeIsSeenByVendor(t *testing.T) {
	_, rs, err := simulated.KFDSlices("mixed-l40s-mi210", "m", driver.RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var c layouts
	n := c.gpusByNode(rs, nil, sets.New("m"))["m"]
	if len(n.free) != 2 {
		t.Fatalf("the mixed node has GPUs %v, want 2", n.free)
	}
	for _, tc := range []struct {
		vendors []string
		gpus    int
		model   string
	}{
		{nil, 2, "NVIDIA L40S"},
		{[]string{api.VendorAMD}, 1, "AMD Instinct MI210"},
		{[]string{api.VendorNVIDIA}, 1, "NVIDIA L40S"},
		{[]string{api.VendorNVIDIA, api.VendorAMD}, 2, "NVIDIA L40S"},
		{[]string{api.VendorHygon}, 0, ""},
	} {
		got := n.of(tc.vendors)
		if len(got.free) != tc.gpus || got.model != tc.model {
			t.Errorf("vendors %v: %d GPUs of model %q, want %d of %q", tc.vendors, len(got.free), got.model, tc.gpus, tc.model)
		}
	}
}

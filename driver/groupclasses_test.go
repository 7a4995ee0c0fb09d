package driver_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// TestSizedNVLinkGroupClasses: the DeviceClass nvlink-group-<k>.gpudra.dev (what a pod's
// extended resource gpudra.dev/nvlink-group-<k> is allocated from, and what Kueue charges as
// k GPUs) selects exactly the NVLink groups of k GPUs a node publishes, none other. Every
// group device of each profile is tried on its own with each sized class, by the real
// allocator and CEL.
func TestSizedNVLinkGroupClasses(t *testing.T) {
	sizes := []int{2, 4, 8}
	for profile, published := range map[string][]int{
		"dgx-v100":      {2, 4}, // linked pairs and the two quads
		"dgx-h100":      {2, 4, 8},
		"hgx-a100-4gpu": {2, 4},
		"hgx-h100-4gpu": {2, 4},
		"l40s-pcie":     nil, // no NVLink
	} {
		t.Run(profile, func(t *testing.T) {
			_, rs := simNode(t, profile, "n")
			bySize := map[int]int{}
			for _, g := range publishedGroups(rs) {
				members := g.members
				for _, k := range sizes {
					// Only this group is a candidate: the selector pins its members.
					claimYAML := fmt.Sprintf(`
devices:
  requests:
  - name: group
    exactly:
      deviceClassName: nvlink-group-%d.gpudra.dev
      selectors:
      - cel: {expression: 'device.attributes["gpu.gpudra.dev"].members == %q'}
`, k, members)
					got := allocate(t, newState(t, rs), "n", claimYAML)
					if fits := got != nil; fits != (g.gpus == k) {
						t.Errorf("group %s (%d GPUs) with class nvlink-group-%d: allocated %v, want allocated = %v", members, g.gpus, k, got, g.gpus == k)
					}
				}
				bySize[g.gpus]++
			}
			if got := slices.Sorted(maps.Keys(bySize)); !slices.Equal(got, published) {
				t.Fatalf("the node publishes groups of %v GPUs, want %v", got, published)
			}
			// A class with no members pinned takes a group of its size while one is free.
			for _, k := range sizes {
				st := newState(t, rs)
				n := 0
				for ; n <= bySize[k]; n++ {
					got := allocate(t, st, "n", fmt.Sprintf("devices: {requests: [{name: g, exactly: {deviceClassName: nvlink-group-%d.gpudra.dev}}]}", k))
					if got == nil {
						break
					}
					if m := groupMembers(t, got); len(m) != k {
						t.Fatalf("nvlink-group-%d.gpudra.dev allocated %v", k, got)
					}
				}
				if bySize[k] > 0 && n == 0 {
					t.Errorf("nvlink-group-%d.gpudra.dev allocated nothing; the node publishes %d such groups", k, bySize[k])
				}
				if bySize[k] == 0 && n > 0 {
					t.Errorf("nvlink-group-%d.gpudra.dev allocated a group; the node publishes none of %d GPUs", k, k)
				}
			}
		})
	}
}

type publishedGroup struct {
	members string
	gpus    int
}

// publishedGroups reads the NVLink group devices out of a node's slices: their members
// attribute and their gpuCount.
func publishedGroups(slices []*resourceapi.ResourceSlice) []publishedGroup {
	var out []publishedGroup
	for _, sl := range slices {
		for _, d := range sl.Spec.Devices {
			attr := func(name string) resourceapi.DeviceAttribute { return d.Attributes[resourceapi.QualifiedName(name)] }
			if typ := attr(api.AttrType).StringValue; typ == nil || *typ != "nvlink-group" {
				continue
			}
			out = append(out, publishedGroup{members: *attr(api.AttrMembers).StringValue, gpus: int(*attr(api.AttrGPUCount).IntValue)})
		}
	}
	return out
}

package driver_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// xgmiGroups are the XGMI group devices a node publishes, by name.
func xgmiGroups(rs []*resourceapi.ResourceSlice) map[string]resourceapi.Device {
	out := map[string]resourceapi.Device{}
	for name, d := range devicesByName(rs) {
		if attrText(d, api.AttrType) == api.TypeXGMIGroup {
			out[name] = d
		}
	}
	return out
}

// An AMD node publishes the aligned pairs, quads and eights of each XGMI hive as group
// devices (on an MI250X the pairs are the two GCDs of one module), each with the
// attributes a cross-vendor group claim reads; nodes without a hive, and GPUs that are
// partitions of one GPU, publish none.
func TestXGMIGroupsArePublished(t *testing.T) {
	eight := []string{
		"xgmi-0-1", "xgmi-2-3", "xgmi-4-5", "xgmi-6-7",
		"xgmi-0-1-2-3", "xgmi-4-5-6-7",
		"xgmi-0-1-2-3-4-5-6-7",
	}
	for profile, want := range map[string][]string{
		"mi300x-8":         eight,
		"mi250x-4":         eight,
		"hygon-dcu-8":      nil, // PCIe only
		"mi300x-cpx":       nil, // eight partitions of one GPU
		"mixed-l40s-mi210": nil,
	} {
		t.Run(profile, func(t *testing.T) {
			rs := kfdNode(t, profile, "n")
			groups := xgmiGroups(rs)
			if got := slices.Sorted(maps.Keys(groups)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
				t.Fatalf("XGMI groups %v, want %v", got, want)
			}
			devs := devicesByName(rs)
			for name, g := range groups {
				members := strings.TrimPrefix(name, "xgmi-")
				first := devs["gpu-"+strings.Split(members, "-")[0]]
				for attr, want := range map[string]string{
					api.AttrMembers:     members,
					api.AttrGPUCount:    fmt.Sprint(strings.Count(members, "-") + 1),
					api.AttrVendor:      api.VendorAMD,
					api.AttrProductName: attrText(first, api.AttrProductName),
					api.AttrLinkDomain:  attrText(first, api.AttrLinkDomain),
					api.AttrXGMIHive:    attrText(first, api.AttrXGMIHive),
					api.AttrGFXTarget:   attrText(first, api.AttrGFXTarget),
				} {
					if got := attrText(g, attr); got != want || got == "" {
						t.Errorf("%s: %s = %q, want %q", name, attr, got, want)
					}
				}
				if len(g.ConsumesCounters) == 0 {
					t.Errorf("%s consumes no counters", name)
				}
			}
		})
	}
}

// groupOf4 is a claim for a group of 4 linked GPUs, written the same for either vendor.
const groupOf4 = "devices: {requests: [{name: g, exactly: {deviceClassName: gpu-group-4.gpudra.dev}}]}"

// membersOf is the GPU device names of a group device's members ("xgmi-0-1": gpu-0, gpu-1).
func membersOf(t *testing.T, devices []string) []string {
	t.Helper()
	if len(devices) != 1 {
		t.Fatalf("want one group device, got %v", devices)
	}
	_, idx, _ := strings.Cut(devices[0], "-")
	var out []string
	for _, i := range strings.Split(idx, "-") {
		out = append(out, "gpu-"+i)
	}
	return out
}

// A group of 4 on an 8-GPU hive leaves exactly 4 whole GPUs, or one more group of 4,
// allocatable, and never one of the group's members: the real allocator, counters and
// the shipped classes.
func TestXGMIGroupAndItsMembersExcludeEachOther(t *testing.T) {
	rs := kfdNode(t, "mi300x-8", "hive")
	one := "devices: {requests: [{name: g, exactly: {deviceClassName: amd-gpu.gpudra.dev}}]}"

	t.Run("then whole GPUs", func(t *testing.T) {
		st := newState(t, rs)
		taken := membersOf(t, mustAllocate(t, st, "hive", groupOf4))
		var whole []string
		for range 4 {
			got := mustAllocate(t, st, "hive", one)
			if slices.Contains(taken, got[0]) {
				t.Fatalf("whole GPU %s is a member of the allocated group %v", got[0], taken)
			}
			whole = append(whole, got...)
		}
		mustNotFit(t, st, "hive", fmt.Sprintf("group %v and GPUs %v hold all 8", taken, whole), one)
		mustNotFit(t, st, "hive", "all 8 GPUs taken", groupOf4)
	})
	t.Run("then a group", func(t *testing.T) {
		st := newState(t, rs)
		first := membersOf(t, mustAllocate(t, st, "hive", groupOf4))
		mustNotFit(t, st, "hive", "half the hive is taken", "devices: {requests: [{name: g, exactly: {deviceClassName: gpu-group-8.gpudra.dev}}]}")
		second := membersOf(t, mustAllocate(t, st, "hive", groupOf4))
		if slices.ContainsFunc(second, func(g string) bool { return slices.Contains(first, g) }) {
			t.Fatalf("groups %v and %v overlap", first, second)
		}
		mustNotFit(t, st, "hive", "two groups of 4 hold all 8", one)
	})
	t.Run("after a whole GPU", func(t *testing.T) {
		st := newState(t, rs)
		gpu := mustAllocate(t, st, "hive", one)
		group := membersOf(t, mustAllocate(t, st, "hive", groupOf4))
		if slices.Contains(group, gpu[0]) {
			t.Fatalf("group %v has the allocated GPU %s", group, gpu[0])
		}
		mustNotFit(t, st, "hive", "the quad with "+gpu[0]+" is not whole", groupOf4)
	})
}

// One claim for a group of 4 linked GPUs, through the cross-vendor classes, lands on an
// NVLink group of an NVIDIA node or an XGMI group of an AMD node; the vendor's own group
// classes take only their vendor's groups.
func TestGroupClassesAcrossVendors(t *testing.T) {
	_, nv := simNode(t, "dgx-h100", "nv")
	amd := kfdNode(t, "mi300x-8", "amd")
	for _, tc := range []struct {
		node, claim, prefix string
	}{
		{"nv", groupOf4, "nvlink-"},
		{"amd", groupOf4, "xgmi-"},
		{"amd", `
devices:
  requests:
  - name: g
    exactly:
      deviceClassName: gpu-group.gpudra.dev
      selectors:
      - cel: {expression: 'device.attributes["gpu.gpudra.dev"].gpuCount == 4'}
`, "xgmi-"},
		{"nv", "devices: {requests: [{name: g, exactly: {deviceClassName: gpu-group.gpudra.dev}}]}", "nvlink-"},
		{"amd", "devices: {requests: [{name: g, exactly: {deviceClassName: xgmi-group.gpudra.dev}}]}", "xgmi-"},
	} {
		st := newState(t, nv, amd)
		got := mustAllocate(t, st, tc.node, tc.claim)
		if len(got) != 1 || !strings.HasPrefix(got[0], tc.prefix) {
			t.Errorf("on %s: allocated %v, want one %s group\n%s", tc.node, got, tc.prefix, tc.claim)
		}
		if tc.claim == groupOf4 && len(membersOf(t, got)) != 4 {
			t.Errorf("gpu-group-4 allocated %v", got)
		}
	}
	mustNotFit(t, newState(t, amd), "amd", "an AMD node has no NVLink group",
		"devices: {requests: [{name: g, exactly: {deviceClassName: nvlink-group-4.gpudra.dev}}]}")
	mustNotFit(t, newState(t, nv), "nv", "an NVIDIA node has no XGMI group",
		"devices: {requests: [{name: g, exactly: {deviceClassName: xgmi-group.gpudra.dev}}]}")
}

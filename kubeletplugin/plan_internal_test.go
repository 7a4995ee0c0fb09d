package kubeletplugin

import (
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// A published device is read for its GPUs; one whose attributes do not say them is refused
// with the attribute named.
func TestReadPublishedNamesTheAttribute(t *testing.T) {
	dev := func(attrs map[string]resourceapi.DeviceAttribute) resourceapi.Device {
		d := resourceapi.Device{Name: "dev", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}}
		for k, v := range attrs {
			d.Attributes[resourceapi.QualifiedName(k)] = v
		}
		return d
	}
	str := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: ptr.To(s)} }
	num := func(n int64) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{IntValue: ptr.To(n)} }
	for _, tc := range []struct {
		name    string
		attrs   map[string]resourceapi.DeviceAttribute
		gpus    []int
		wantErr string
	}{
		{"a GPU", map[string]resourceapi.DeviceAttribute{api.AttrType: str(api.TypeGPU), api.AttrIndex: num(3)}, []int{3}, ""},
		{"a MIG device", map[string]resourceapi.DeviceAttribute{api.AttrType: str(api.TypeMIG), api.AttrParentIndex: num(1)}, []int{1}, ""},
		{"an NVLink group", map[string]resourceapi.DeviceAttribute{api.AttrType: str(api.TypeNVLinkGroup), api.AttrMembers: str("0-1-2-3")}, []int{0, 1, 2, 3}, ""},
		{"a share without its index", map[string]resourceapi.DeviceAttribute{api.AttrType: str(api.TypeShare)}, nil, "attribute index is missing"},
		{"a MIG device without its parent", map[string]resourceapi.DeviceAttribute{api.AttrType: str(api.TypeMIG)}, nil, "attribute parentIndex is missing"},
		{"a GPU with a string index", map[string]resourceapi.DeviceAttribute{api.AttrType: str(api.TypeGPU), api.AttrIndex: str("3")}, nil, "attribute index: want an int"},
		{"an NVLink group with a malformed members list", map[string]resourceapi.DeviceAttribute{api.AttrType: str(api.TypeNVLinkGroup), api.AttrMembers: str("0-x")}, nil, `attribute members "0-x"`},
		{"an unknown type", map[string]resourceapi.DeviceAttribute{api.AttrType: str("tpu")}, nil, "attribute type \"tpu\": accepted values are"},
	} {
		info, err := readPublished(dev(tc.attrs))
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.wantErr == "" && !slices.Equal(info.GPUs, tc.gpus):
			t.Errorf("%s: GPUs %v, want %v", tc.name, info.GPUs, tc.gpus)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v, want one with %q", tc.name, err, tc.wantErr)
		}
	}
}

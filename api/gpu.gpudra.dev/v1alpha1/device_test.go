package v1alpha1_test

import (
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/simulated"
)

// Every device a DGX H100 node publishes (dynamic MIG, so every kind) reads back with the
// GPUs it uses.
func TestReadDeviceReadsWhatTheDriverPublishes(t *testing.T) {
	_, sl, err := simulated.Slices("dgx-h100", "node-a", driver.RenderOptions{MIG: driver.MIGDynamic})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, s := range sl {
		for k := range s.Spec.Devices {
			d := &s.Spec.Devices[k]
			info, err := api.ReadDevice(d)
			if err != nil {
				t.Fatalf("%s: %v", d.Name, err)
			}
			seen[info.Type]++
			switch info.Type {
			case api.TypeGPU:
				if d.Name != driver.GPUDeviceName(info.GPUs[0]) || info.Model == "" || info.UUID == "" || info.Memory.IsZero() {
					t.Errorf("%s reads as %+v", d.Name, info)
				}
			case api.TypeShare:
				if d.Name != driver.ShareDeviceName(info.GPUs[0]) || info.MemoryOversubscriptionPercent != 100 || info.MemoryOversubscribed || info.Compute.Value() != 100 {
					t.Errorf("%s reads as %+v", d.Name, info)
				}
			case api.TypeMIG:
				if d.Name != driver.MIGDeviceName(info.GPUs[0], info.MIGProfile, info.MIGPlacementStart) || info.ParentUUID == "" || info.MIGPlacementSize == 0 {
					t.Errorf("%s reads as %+v", d.Name, info)
				}
			case api.TypeNVLinkGroup:
				if d.Name != driver.GroupDeviceName(info.Members) || !slices.Equal(info.GPUs, info.Members) || len(info.Members) < 2 {
					t.Errorf("%s reads as %+v", d.Name, info)
				}
			}
		}
	}
	for _, typ := range []string{api.TypeGPU, api.TypeShare, api.TypeMIG, api.TypeNVLinkGroup} {
		if seen[typ] == 0 {
			t.Errorf("no %s device read", typ)
		}
	}
}

// An XGMI group of an AMD node reads back with its members as the GPUs it uses.
func TestReadDeviceReadsXGMIGroups(t *testing.T) {
	_, sl, err := simulated.KFDSlices("mi300x-8", "node-a", driver.RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	groups := 0
	for _, s := range sl {
		for k := range s.Spec.Devices {
			d := &s.Spec.Devices[k]
			info, err := api.ReadDevice(d)
			if err != nil {
				t.Fatalf("%s: %v", d.Name, err)
			}
			if info.Type != api.TypeXGMIGroup {
				continue
			}
			groups++
			if d.Name != driver.XGMIGroupDeviceName(info.Members) || !slices.Equal(info.GPUs, info.Members) || len(info.Members) < 2 || info.Vendor != api.VendorAMD {
				t.Errorf("%s reads as %+v", d.Name, info)
			}
		}
	}
	if groups == 0 {
		t.Error("no XGMI group read")
	}
}

func TestReadDeviceRefusesMalformedAttributes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
		want  string
	}{
		{"no type", nil, `attribute type "": accepted values are gpu, share, mig, nvlink-group, xgmi-group`},
		{"unknown type", map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{api.AttrType: {StringValue: ptr.To("tpu")}}, `"tpu": accepted values`},
		{"index not an int", map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{api.AttrType: {StringValue: ptr.To(api.TypeGPU)}, api.AttrIndex: {StringValue: ptr.To("0")}}, "attribute index: want an int"},
		{"members not indices", map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{api.AttrType: {StringValue: ptr.To(api.TypeNVLinkGroup)}, api.AttrMembers: {StringValue: ptr.To("0,x")}}, `attribute members "0,x": want GPU indices joined by "-"`},
		{"members missing", map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{api.AttrType: {StringValue: ptr.To(api.TypeNVLinkGroup)}}, "attribute members is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := api.ReadDevice(&resourceapi.Device{Name: "dev", Attributes: tc.attrs})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "device dev") {
				t.Errorf("got %v, want an error naming device dev and containing %q", err, tc.want)
			}
		})
	}
}

// Attributes read the same with the driver's domain spelled out.
func TestReadDeviceAcceptsQualifiedNames(t *testing.T) {
	info, err := api.ReadDevice(&resourceapi.Device{Name: "gpu-3", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		api.DriverName + "/" + api.AttrType:  {StringValue: ptr.To(api.TypeGPU)},
		api.DriverName + "/" + api.AttrIndex: {IntValue: ptr.To[int64](3)},
	}})
	if err != nil || !slices.Equal(info.GPUs, []int{3}) {
		t.Errorf("got %+v, %v; want GPU 3", info, err)
	}
}

// Every GPU says its vendor: NVIDIA's and AMD's side by side on one node, and a device
// published before the vendor attribute existed reads as NVIDIA.
func TestReadDeviceReadsTheVendor(t *testing.T) {
	_, sl, err := simulated.KFDSlices("mixed-l40s-mi210", "node-m", driver.RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byModel := map[string]string{}
	for _, s := range sl {
		for k := range s.Spec.Devices {
			info, err := api.ReadDevice(&s.Spec.Devices[k])
			if err != nil {
				t.Fatal(err)
			}
			if info.Type == api.TypeGPU {
				byModel[info.Model] = info.Vendor
			}
		}
	}
	if byModel["AMD Instinct MI210"] != api.VendorAMD || len(byModel) != 2 {
		t.Errorf("GPUs by model read with vendors %v, want the MI210 amd", byModel)
	}
	for model, v := range byModel {
		if model != "AMD Instinct MI210" && v != api.VendorNVIDIA {
			t.Errorf("%s reads with vendor %q, want %q", model, v, api.VendorNVIDIA)
		}
	}

	info, err := api.ReadDevice(&resourceapi.Device{Name: "gpu-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		api.AttrType: {StringValue: ptr.To(api.TypeGPU)}, api.AttrIndex: {IntValue: ptr.To[int64](0)},
	}})
	if err != nil || info.Vendor != api.VendorNVIDIA {
		t.Errorf("a device without a vendor attribute reads as vendor %q (%v), want %q", info.Vendor, err, api.VendorNVIDIA)
	}
	_, err = api.ReadDevice(&resourceapi.Device{Name: "gpu-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		api.AttrType: {StringValue: ptr.To(api.TypeGPU)}, api.AttrVendor: {IntValue: ptr.To[int64](1)},
	}})
	if err == nil || !strings.Contains(err.Error(), "attribute vendor: want a string") {
		t.Errorf("a vendor that is not a string: %v, want an error naming the attribute", err)
	}
}

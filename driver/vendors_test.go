package driver_test

import (
	"strconv"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/simulated"
)

// kfdNode renders a simulated AMD or Hygon node (driver/kfdsim) as its plugin publishes it.
func kfdNode(t *testing.T, profile, nodeName string) []*resourceapi.ResourceSlice {
	t.Helper()
	inv, err := simulated.KFDInventory(profile, nodeName)
	if err != nil {
		t.Fatal(err)
	}
	return render(t, inv, nodeName, driver.RenderOptions{})
}

// attrText is an attribute's value as text, "" when the device has none.
func attrText(d resourceapi.Device, name string) string {
	a, ok := d.Attributes[resourceapi.QualifiedName(name)]
	switch {
	case !ok:
		return ""
	case a.StringValue != nil:
		return *a.StringValue
	case a.IntValue != nil:
		return strconv.FormatInt(*a.IntValue, 10)
	case a.VersionValue != nil:
		return *a.VersionValue
	case a.BoolValue != nil:
		return strconv.FormatBool(*a.BoolValue)
	}
	return ""
}

// One node with an NVIDIA and an AMD GPU publishes both as type gpu with the common
// attributes, the AMD one with its own (gfxTarget) and none of NVIDIA's, and a share only
// for the NVIDIA one: nothing enforces a share's limits on AMD GPUs.
func TestMixedNodePublishesOneVocabulary(t *testing.T) {
	devs := devicesByName(kfdNode(t, "mixed-l40s-mi210", "mixed"))
	nv, amd := devs["gpu-0"], devs["gpu-1"]
	if attrText(nv, api.AttrVendor) != api.VendorNVIDIA || attrText(amd, api.AttrVendor) != api.VendorAMD {
		t.Fatalf("vendors %q, %q; want nvidia, amd", attrText(nv, api.AttrVendor), attrText(amd, api.AttrVendor))
	}
	for _, d := range []resourceapi.Device{nv, amd} {
		for _, a := range []string{api.AttrType, api.AttrIndex, api.AttrUUID, api.AttrProductName, "resource.kubernetes.io/pcieRoot", "resource.kubernetes.io/numaNode", "resource.kubernetes.io/pciBusID"} {
			if attrText(d, a) == "" {
				t.Errorf("%s has no %s", d.Name, a)
			}
		}
		for _, c := range []string{api.CapMemory, api.CapMultiprocessors, api.CapCompute} {
			if _, ok := d.Capacity[resourceapi.QualifiedName(c)]; !ok {
				t.Errorf("%s has no capacity %s", d.Name, c)
			}
		}
	}
	if got := attrText(amd, api.AttrGFXTarget); got != "gfx90a" {
		t.Errorf("AMD GPU: gfxTarget %q, want gfx90a", got)
	}
	for _, a := range []string{api.AttrCUDAComputeCapability, api.AttrNVLinkFabric, api.AttrDriverVersion} {
		if got := attrText(amd, a); got != "" {
			t.Errorf("AMD GPU publishes NVIDIA's %s = %q", a, got)
		}
	}
	if _, ok := devs["gpu-0-share"]; !ok {
		t.Error("the NVIDIA GPU publishes no share")
	}
	if _, ok := devs["gpu-1-share"]; ok {
		t.Error("the AMD GPU publishes a share")
	}
}

// The vendor classes take their vendor's GPUs only, and any-gpu.gpudra.dev with a memory
// selector lands on whichever vendor has a GPU that large, by the real allocator.
func TestVendorClasses(t *testing.T) {
	mixed := kfdNode(t, "mixed-l40s-mi210", "mixed")
	hygon := kfdNode(t, "hygon-dcu-8", "dcu")
	const anyGPU64 = `
devices:
  requests:
  - name: gpu
    exactly:
      deviceClassName: any-gpu.gpudra.dev
      selectors:
      - cel: {expression: 'device.capacity["gpu.gpudra.dev"].memory.compareTo(quantity("64Gi")) >= 0'}
`
	// The L40S has 45 GiB: only the MI210 fits.
	if got := mustAllocate(t, newState(t, mixed), "mixed", anyGPU64); len(got) != 1 || got[0] != "gpu-1" {
		t.Errorf("any GPU of 64Gi on the mixed node: %v, want the MI210 (gpu-1)", got)
	}
	mustNotFit(t, newState(t, hygon), "dcu", "32 GiB DCUs", anyGPU64)
	for class, want := range map[string]string{api.DeviceClassGPU: "gpu-0", api.DeviceClassAMDGPU: "gpu-1"} {
		st := newState(t, mixed)
		one := "devices: {requests: [{name: g, exactly: {deviceClassName: " + class + "}}]}"
		if got := mustAllocate(t, st, "mixed", one); len(got) != 1 || got[0] != want {
			t.Errorf("%s on the mixed node: %v, want %s", class, got, want)
		}
		mustNotFit(t, st, "mixed", class+" has one GPU there", one)
	}
	mustNotFit(t, newState(t, mixed), "mixed", "no Hygon DCU", "devices: {requests: [{name: g, exactly: {deviceClassName: hygon-gpu.gpudra.dev}}]}")
	if got := mustAllocate(t, newState(t, hygon), "dcu", "devices: {requests: [{name: g, exactly: {deviceClassName: hygon-gpu.gpudra.dev, count: 8}}]}"); len(got) != 8 {
		t.Errorf("8 DCUs: %v", got)
	}
}

// Four GPUs with a matchAttribute on xgmiHive (or linkDomain) land in one XGMI hive; on a
// PCIe-only node, where no GPU has a hive, they do not fit.
func TestXGMIHiveMatchAttribute(t *testing.T) {
	for _, attrName := range []string{api.AttrXGMIHive, api.AttrLinkDomain} {
		t.Run(attrName, func(t *testing.T) {
			claim := `
devices:
  requests:
  - name: gpus
    exactly: {deviceClassName: any-gpu.gpudra.dev, count: 4}
  constraints:
  - matchAttribute: gpu.gpudra.dev/` + attrName + "\n"
			st := newState(t, kfdNode(t, "mi300x-8", "hive"))
			mustAllocate(t, st, "hive", claim)
			mustAllocate(t, st, "hive", claim)
			mustNotFit(t, st, "hive", "all 8 GPUs taken", claim)
			mustNotFit(t, newState(t, kfdNode(t, "hygon-dcu-8", "pcie")), "pcie", "no hive", claim)
		})
	}
}

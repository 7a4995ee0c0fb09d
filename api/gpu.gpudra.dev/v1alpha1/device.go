package v1alpha1

import (
	"fmt"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// DeviceInfo is what a published gpudra device says about itself in its attributes and
// capacities, typed. Fields a device of its type does not carry are zero.
//
// +k8s:deepcopy-gen=false
type DeviceInfo struct {
	// Type is TypeGPU, TypeShare, TypeMIG, TypeNVLinkGroup or TypeXGMIGroup.
	Type string
	// GPUs are the indices of the GPUs the device uses: its own index (a GPU, a share),
	// its parent's (a MIG device) or its members (an NVLink or XGMI group).
	GPUs []int
	// UUID is the GPU's UUID, or the MIG instance's where it exists.
	UUID string
	// ParentUUID is a MIG device's GPU.
	ParentUUID string
	// Vendor is VendorNVIDIA, VendorAMD or VendorHygon, as the vendor attribute says. A
	// device without the attribute reads as VendorNVIDIA: gpudra published NVIDIA GPUs
	// alone before it published the attribute. Another value is read as it is, so that a
	// newer driver's vendor still shows.
	Vendor string
	// Model is the productName ("NVIDIA H100 80GB HBM3").
	Model        string
	Brand        string
	Architecture string
	// MIGCapable is whether a GPU can be partitioned.
	MIGCapable bool
	// MIGProfile, MIGPlacementStart and MIGPlacementSize place a MIG device on its GPU.
	MIGProfile                          string
	MIGPlacementStart, MIGPlacementSize int
	// Members are an NVLink or XGMI group's GPUs, as its members attribute lists them.
	Members []int
	// NVLinkClique and NVLinkDomain are a GPU's NVLink clique and domain, if any.
	NVLinkClique, NVLinkDomain string
	// MemoryOversubscribed is whether a share's memory capacity is more than its card's;
	// MemoryOversubscriptionPercent is that capacity in percent of its card's (100 when
	// not oversubscribed; 0 on a device that does not say).
	MemoryOversubscribed          bool
	MemoryOversubscriptionPercent int
	// Memory is the memory capacity (bytes); Compute the compute capacity (percent of a
	// GPU). Zero when the device has none.
	Memory, Compute resource.Quantity
}

// deviceTypes are the accepted values of the type attribute.
var deviceTypes = []string{TypeGPU, TypeShare, TypeMIG, TypeNVLinkGroup, TypeXGMIGroup}

// attribute is a gpudra attribute of d by its name, with or without the driver's domain.
func attribute(d *resourceapi.Device, name string) (resourceapi.DeviceAttribute, bool) {
	if a, ok := d.Attributes[resourceapi.QualifiedName(name)]; ok {
		return a, true
	}
	a, ok := d.Attributes[resourceapi.QualifiedName(DriverName+"/"+name)]
	return a, ok
}

func capacityOf(d *resourceapi.Device, name string) resource.Quantity {
	if c, ok := d.Capacity[resourceapi.QualifiedName(name)]; ok {
		return c.Value
	}
	return d.Capacity[resourceapi.QualifiedName(DriverName+"/"+name)].Value
}

// DeviceType is d's type attribute ("" when it has none or it is not a string).
func DeviceType(d *resourceapi.Device) string {
	if a, ok := attribute(d, AttrType); ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

// ReadDevice reads a device gpudra published. It fails on a device without a known type
// and on an attribute of the wrong kind or form, naming the attribute.
func ReadDevice(d *resourceapi.Device) (DeviceInfo, error) {
	var info DeviceInfo
	var errs []string
	str := func(name string) string {
		a, ok := attribute(d, name)
		if !ok {
			return ""
		}
		switch {
		case a.StringValue != nil:
			return *a.StringValue
		case a.VersionValue != nil:
			return *a.VersionValue
		}
		errs = append(errs, fmt.Sprintf("attribute %s: want a string", name))
		return ""
	}
	num := func(name string) (int, bool) {
		a, ok := attribute(d, name)
		if !ok {
			return 0, false
		}
		if a.IntValue == nil {
			errs = append(errs, fmt.Sprintf("attribute %s: want an int", name))
			return 0, false
		}
		return int(*a.IntValue), true
	}
	boolean := func(name string) bool {
		a, ok := attribute(d, name)
		if !ok {
			return false
		}
		if a.BoolValue == nil {
			errs = append(errs, fmt.Sprintf("attribute %s: want a bool", name))
			return false
		}
		return *a.BoolValue
	}
	info.Type = str(AttrType)
	switch info.Type {
	case TypeGPU, TypeShare:
		if i, ok := num(AttrIndex); ok {
			info.GPUs = []int{i}
		}
	case TypeMIG:
		if i, ok := num(AttrParentIndex); ok {
			info.GPUs = []int{i}
		}
	case TypeNVLinkGroup, TypeXGMIGroup:
		m, err := ParseMembers(str(AttrMembers))
		if err != nil {
			errs = append(errs, err.Error())
		}
		info.Members = m
		info.GPUs = m
	default:
		return info, fmt.Errorf("device %s: attribute %s %q: accepted values are %s", d.Name, AttrType, info.Type, strings.Join(deviceTypes, ", "))
	}
	info.UUID = str(AttrUUID)
	info.ParentUUID = str(AttrParentUUID)
	info.Vendor = str(AttrVendor)
	if _, ok := attribute(d, AttrVendor); !ok {
		info.Vendor = VendorNVIDIA
	}
	info.Model = str(AttrProductName)
	info.Brand = str(AttrBrand)
	info.Architecture = str(AttrArchitecture)
	info.MIGCapable = boolean(AttrMIGCapable)
	info.MIGProfile = str(AttrMIGProfile)
	info.MIGPlacementStart, _ = num(AttrMIGPlacementStart)
	info.MIGPlacementSize, _ = num(AttrMIGPlacementSize)
	info.NVLinkClique = str(AttrNVLinkClique)
	info.NVLinkDomain = str(AttrNVLinkDomain)
	info.MemoryOversubscribed = boolean(AttrMemoryOversubscribed)
	info.MemoryOversubscriptionPercent, _ = num(AttrMemoryOversubscriptionPercent)
	info.Memory = capacityOf(d, CapMemory)
	info.Compute = capacityOf(d, CapCompute)
	if len(errs) > 0 {
		return info, fmt.Errorf("device %s: %s", d.Name, strings.Join(errs, "; "))
	}
	return info, nil
}

// ParseMembers reads an NVLink or XGMI group's members attribute: GPU indices joined by "-"
// ("0-1-2-3").
func ParseMembers(s string) ([]int, error) {
	if s == "" {
		return nil, fmt.Errorf("attribute %s is empty: want GPU indices joined by \"-\" (\"0-1-2-3\")", AttrMembers)
	}
	parts := strings.Split(s, "-")
	out := make([]int, 0, len(parts))
	for _, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("attribute %s %q: want GPU indices joined by \"-\" (\"0-1-2-3\")", AttrMembers, s)
		}
		out = append(out, n)
	}
	return out, nil
}

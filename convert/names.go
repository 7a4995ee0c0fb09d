package convert

import (
	"regexp"
	"strings"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// Names of NVIDIA's DRA driver (github.com/NVIDIA/k8s-dra-driver-gpu, now
// kubernetes-sigs/dra-driver-nvidia-gpu) and of NVIDIA's device plugin.
const (
	// nvDriver is the driver name of NVIDIA's GPU kubelet plugin, the domain of its
	// attributes and capacities.
	nvDriver = "gpu.nvidia.com"
	// nvComputeDomainDriver is the driver of NVIDIA's ComputeDomain (IMEX) kubelet plugin.
	nvComputeDomainDriver = "compute-domain.nvidia.com"

	nvClassGPU  = "gpu.nvidia.com"
	nvClassMIG  = "mig.nvidia.com"
	nvClassVFIO = "vfio.gpu.nvidia.com"

	// nvConfigGroup is the API group of NVIDIA's opaque configs and of ComputeDomain.
	nvConfigGroup      = "resource.nvidia.com"
	nvConfigAPIVersion = nvConfigGroup + "/v1beta1"
	nvGpuConfig        = "GpuConfig"
	nvMigDeviceConfig  = "MigDeviceConfig"

	// Device-plugin resource names.
	dpGPU       = "nvidia.com/gpu"
	dpMIGPrefix = "nvidia.com/mig-"

	// stdDomain is Kubernetes' domain of standard device attributes.
	stdDomain = "resource.kubernetes.io"
)

// nvComputeDomainClasses are the DeviceClasses of NVIDIA's ComputeDomain driver (IMEX
// channels and daemons) across its releases.
var nvComputeDomainClasses = map[string]bool{
	"compute-domain-default-channel.nvidia.com": true,
	"compute-domain-daemon.nvidia.com":          true,
	"imex.nvidia.com":                           true,
}

// nvOwnClasses are the DeviceClasses NVIDIA's chart installs, with the gpudra class that
// takes each one's place ("" for none).
var nvOwnClasses = map[string]string{
	nvClassGPU:  api.DeviceClassGPU,
	nvClassMIG:  api.DeviceClassMIG,
	nvClassVFIO: "",
	"compute-domain-default-channel.nvidia.com": "",
	"compute-domain-daemon.nvidia.com":          "",
	"imex.nvidia.com":                           "",
}

// kind is the kind of gpudra device a converted request asks for.
type kind int

const (
	kindGPU kind = iota + 1
	kindShare
	kindMIG
)

func (k kind) String() string {
	switch k {
	case kindGPU:
		return "whole GPU"
	case kindShare:
		return "GPU share"
	case kindMIG:
		return "MIG device"
	}
	return "unknown"
}

// deviceType is the value of gpudra's type attribute for k.
func (k kind) deviceType() string {
	switch k {
	case kindGPU:
		return api.TypeGPU
	case kindShare:
		return api.TypeShare
	case kindMIG:
		return api.TypeMIG
	}
	return ""
}

// class is gpudra's DeviceClass for k.
func (k kind) class() string {
	switch k {
	case kindGPU:
		return api.DeviceClassGPU
	case kindShare:
		return api.DeviceClassShare
	case kindMIG:
		return api.DeviceClassMIG
	}
	return ""
}

// What gpudra publishes on each kind of device (driver/devices.go): attribute and
// capacity names by domain. A test checks these against the slices of simulated nodes.
var (
	gpudraIdentity = []string{api.AttrVendor, api.AttrProductName, api.AttrBrand, api.AttrArchitecture,
		api.AttrCUDAComputeCapability, api.AttrDriverVersion, api.AttrCUDADriverVersion}
	gpudraTopology = []string{api.AttrNVLinkFabric, api.AttrNVLinkLinks, api.AttrNVLinkClique, api.AttrNVLinkDomain, api.AttrLinkDomain}

	gpudraAttrs = map[kind]map[string][]string{
		kindGPU: {
			api.DriverName: concat([]string{api.AttrType, api.AttrIndex, api.AttrUUID, api.AttrMIGCapable}, gpudraIdentity, gpudraTopology),
			stdDomain:      {"pciBusID", "pcieRoot", "numaNode"},
		},
		kindShare: {
			api.DriverName: concat([]string{api.AttrType, api.AttrIndex, api.AttrUUID, api.AttrMemoryOversubscribed, api.AttrMemoryOversubscriptionPercent}, gpudraIdentity, gpudraTopology),
			stdDomain:      {"pciBusID", "pcieRoot", "numaNode"},
		},
		kindMIG: {
			api.DriverName: concat([]string{api.AttrType, api.AttrParentIndex, api.AttrParentUUID, api.AttrMIGProfile,
				api.AttrMIGPlacementStart, api.AttrMIGPlacementSize}, gpudraIdentity),
			stdDomain: {"pcieRoot", "numaNode"},
		},
	}
	// gpudraStaticMIGAttrs are published on MIG devices of nodes with static MIG only.
	gpudraStaticMIGAttrs = []string{api.AttrUUID}
	gpudraCapacities     = map[kind][]string{
		kindGPU:   {api.CapMemory, api.CapMultiprocessors, api.CapCompute},
		kindShare: {api.CapMemory, api.CapCompute},
		kindMIG:   {api.CapMemory, api.CapMultiprocessors, api.CapCompute},
	}
)

func concat(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// publishes reports whether gpudra's devices of kind k carry the attribute (field
// "attributes") or capacity (field "capacity") domain/name.
func publishes(k kind, field, domain, name string) bool {
	if k == kindMIG && field == "attributes" && domain == api.DriverName && contains(gpudraStaticMIGAttrs, name) {
		return true
	}
	if field == "capacity" {
		return domain == api.DriverName && contains(gpudraCapacities[k], name)
	}
	return contains(gpudraAttrs[k][domain], name)
}

// target is what an attribute or capacity of NVIDIA's driver becomes, or why it cannot.
type target struct {
	domain, name string
	why          string // non-empty: no gpudra equivalent
	// staticMIG: gpudra publishes it only on the MIG devices that exist, on nodes with
	// static MIG (a MIG device's uuid); dynamic MIG devices lack it until prepared.
	staticMIG bool
}

// staticMIGOnly says why an attribute that only static MIG devices carry cannot be used
// where a device without it would fail the claim.
const staticMIGOnly = "gpudra publishes a MIG device's uuid only for the instances that exist on nodes with static MIG (--mig=static); a dynamic MIG device gets one when its claim is prepared"

var sameIdentity = []string{"type", "productName", "brand", "architecture", "cudaComputeCapability", "driverVersion", "cudaDriverVersion"}

// nvAttribute maps an attribute NVIDIA's driver publishes in domain gpu.nvidia.com, on
// a device of the NVIDIA class that converts to kind k, to gpudra's name for it. The
// names are those of NVIDIA's ResourceSlices across its releases (index, parentIndex and
// minor were published by releases before 25.8, pcieBusID by releases before 25.12).
func nvAttribute(k kind, name string) target {
	if contains(sameIdentity, name) {
		return target{domain: api.DriverName, name: name}
	}
	mig := k == kindMIG
	switch name {
	case "uuid":
		return target{domain: api.DriverName, name: api.AttrUUID, staticMIG: mig}
	case "index":
		if mig {
			return target{why: "the index of a MIG device among its GPU's has no gpudra equivalent; gpudra's MIG devices carry parentIndex and migPlacementStart"}
		}
		return target{domain: api.DriverName, name: api.AttrIndex}
	case "profile":
		if mig {
			return target{domain: api.DriverName, name: api.AttrMIGProfile}
		}
	case "parentUUID":
		if mig {
			return target{domain: api.DriverName, name: api.AttrParentUUID}
		}
	case "parentIndex":
		if mig {
			return target{domain: api.DriverName, name: api.AttrParentIndex}
		}
	case "pcieBusID":
		if !mig {
			return target{domain: stdDomain, name: "pciBusID"}
		}
		return target{why: "gpudra's MIG devices do not publish a PCI bus ID (they carry resource.kubernetes.io/pcieRoot and numaNode)"}
	case "minor":
		return target{why: "gpudra publishes no device minor number; select by index or uuid"}
	case "addressingMode":
		return target{why: "gpudra publishes no addressing mode"}
	}
	if !mig && contains([]string{"profile", "parentUUID", "parentIndex"}, name) {
		return target{why: "an attribute of MIG devices, which NVIDIA's GPUs do not carry either"}
	}
	on := "GPUs"
	if mig {
		on = "MIG devices"
	}
	return target{why: "not an attribute NVIDIA's driver is known to publish on " + on + "; no gpudra equivalent"}
}

// nvCapacity maps a capacity of NVIDIA's driver on a device of kind k.
func nvCapacity(k kind, name string) target {
	switch {
	case name == "memory":
		return target{domain: api.DriverName, name: api.CapMemory}
	case name == "multiprocessors" && k != kindShare:
		return target{domain: api.DriverName, name: api.CapMultiprocessors}
	case name == "multiprocessors":
		return target{why: "a gpudra share has capacities memory and compute (percent of the SMs), not multiprocessors"}
	case strings.HasPrefix(name, "memorySlice"):
		return target{why: "gpudra keeps MIG memory slices in shared counters, not capacities; select a placement by migPlacementStart and migPlacementSize"}
	case contains([]string{"copyEngines", "decoders", "encoders", "jpegEngines", "ofaEngines"}, name):
		return target{why: "gpudra publishes the capacities " + strings.Join(gpudraCapacities[k], ", ") + " only"}
	case name == "shares":
		return target{why: "gpudra shares are sized by memory and compute, not by a count of shares"}
	}
	return target{why: "not a capacity NVIDIA's driver is known to publish; no gpudra equivalent"}
}

// migResource matches the device plugin's MIG resource names (mixed strategy):
// nvidia.com/mig-<profile> with "+" spelled ".", e.g. nvidia.com/mig-1g.10gb.me.
var migResource = regexp.MustCompile(`^nvidia\.com/mig-([1-9][0-9]*g\.[1-9][0-9]*gb)((?:\.me|\.me\.all|\.gfx|-me|-gfx)?)$`)

// migProfileOf returns the MIG profile a device-plugin MIG resource name stands for.
// Only the forms whose spelling is unambiguous are accepted: a plain profile (1g.10gb)
// and one media or graphics extension (1g.10gb.me is 1g.10gb+me, 1g.10gb-me stays).
func migProfileOf(resource string) (string, bool) {
	m := migResource.FindStringSubmatch(resource)
	if m == nil {
		return "", false
	}
	ext := m[2]
	if strings.HasPrefix(ext, ".") {
		ext = "+" + ext[1:]
	}
	return m[1] + ext, true
}

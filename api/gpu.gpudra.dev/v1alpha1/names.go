package v1alpha1

import (
	"strconv"
	"strings"
)

// DriverName is the DRA driver name, the domain of every attribute and capacity a gpudra
// device publishes, and the API group of the opaque configuration kinds.
const DriverName = Group

// DeviceClasses gpudra ships (deployments/deviceclasses). Each selects one device type.
const (
	// DeviceClassGPU selects whole NVIDIA GPUs (and is nvidia.com/gpu).
	DeviceClassGPU = "gpu.gpudra.dev"
	// DeviceClassShare selects fractional shares of a GPU (memory and compute capacity).
	DeviceClassShare = "gpu-share.gpudra.dev"
	// DeviceClassMIG selects MIG devices.
	DeviceClassMIG = "mig.gpudra.dev"
	// DeviceClassNVLinkGroup selects NVLink groups of any size.
	DeviceClassNVLinkGroup = "nvlink-group.gpudra.dev"
	// DeviceClassAMDGPU and DeviceClassHygonGPU select whole AMD Instinct GPUs and Hygon
	// DCUs (DeviceClassGPU selects NVIDIA's); DeviceClassAnyGPU selects a whole GPU of any
	// vendor.
	DeviceClassAMDGPU   = "amd-gpu.gpudra.dev"
	DeviceClassHygonGPU = "hygon-gpu.gpudra.dev"
	DeviceClassAnyGPU   = "any-gpu.gpudra.dev"
	// DeviceClassXGMIGroup selects XGMI groups (AMD, Hygon) of any size;
	// DeviceClassGPUGroup selects linked groups of any vendor: NVLink and XGMI groups.
	DeviceClassXGMIGroup = "xgmi-group.gpudra.dev"
	DeviceClassGPUGroup  = "gpu-group.gpudra.dev"
)

// DeviceClassGPUGroupOf is the DeviceClass of linked groups of n GPUs of any vendor
// ("gpu-group-4.gpudra.dev"); the chart ships n = 2, 4 and 8.
func DeviceClassGPUGroupOf(n int) string { return "gpu-group-" + strconv.Itoa(n) + ".gpudra.dev" }

// DeviceClassNVLinkGroupOf is the DeviceClass of NVLink groups of n GPUs
// ("nvlink-group-4.gpudra.dev"); the chart ships n = 2, 4 and 8.
func DeviceClassNVLinkGroupOf(n int) string { return "nvlink-group-" + strconv.Itoa(n) + ".gpudra.dev" }

// ClassGPUs is how many whole GPUs one device of a DeviceClass gpudra ships holds: 1 for
// the whole-GPU classes of every vendor, n for the sized group classes (nvlink-group-n,
// gpu-group-n), 2 for the group classes whose size a request leaves open (the smallest
// group they select). ok is false for the share, MIG and unknown classes, which hold no
// whole GPU.
func ClassGPUs(class string) (gpus int, ok bool) {
	switch class {
	case DeviceClassGPU, DeviceClassAMDGPU, DeviceClassHygonGPU, DeviceClassAnyGPU:
		return 1, true
	case DeviceClassNVLinkGroup, DeviceClassXGMIGroup, DeviceClassGPUGroup:
		return 2, true
	}
	name, found := strings.CutSuffix(class, ".gpudra.dev")
	if !found {
		return 0, false
	}
	for _, prefix := range []string{"nvlink-group-", "gpu-group-"} {
		if size, sized := strings.CutPrefix(name, prefix); sized {
			n, err := strconv.Atoi(size)
			return n, err == nil && n > 0
		}
	}
	return 0, false
}

// WholeDeviceClass says whether class is one gpudra ships whose devices are allocated whole
// (gpu, mig, nvlink-group, and the sized group and MIG-profile classes): every class but
// the share class. The allocator gives such a device whole whatever a request's
// capacity.requests ask, so a capacity request means nothing there.
func WholeDeviceClass(class string) bool {
	switch class {
	case DeviceClassGPU, DeviceClassMIG, DeviceClassNVLinkGroup, DeviceClassAMDGPU, DeviceClassHygonGPU, DeviceClassAnyGPU,
		DeviceClassXGMIGroup, DeviceClassGPUGroup:
		return true
	}
	name, ok := strings.CutSuffix(class, ".gpudra.dev")
	return ok && (strings.HasPrefix(name, "nvlink-group-") || strings.HasPrefix(name, "gpu-group-") || strings.HasPrefix(name, "mig-"))
}

// QuotaGPUPercent is the resource Kueue quotas count GPUs in, in percent of one GPU (a
// queue with 4 GPUs has 400): Kueue charges every gpudra device its compute capacity (a
// whole GPU 100, an NVLink group 100 per GPU, a MIG device the part of its GPU it takes, a
// share the compute it asks for), and the extended resources through transformations.
const QuotaGPUPercent = "gpudra.dev/gpu-percent"

// QuotaGPU is the resource whole GPUs are charged to, one a GPU, when a Kueue installation
// charges them by count instead of in QuotaGPUPercent (deployments.KueueWholeGPUQuotaCount:
// cheaper for Kueue on a large cluster, at the cost of a second quota resource).
const QuotaGPU = "gpudra.dev/gpu"

// Extended resources. A container may ask for a DeviceClass's extendedResourceName in its
// resources (KEP-5004) and kube-scheduler turns it into a claim.

// ExtendedResourceNVLinkGroupOf is the extendedResourceName of DeviceClassNVLinkGroupOf(n)
// ("gpudra.dev/nvlink-group-4").
func ExtendedResourceNVLinkGroupOf(n int) string { return "gpudra.dev/nvlink-group-" + strconv.Itoa(n) }

// Device types: the value of the "type" attribute.
const (
	TypeGPU         = "gpu"
	TypeShare       = "share"
	TypeMIG         = "mig"
	TypeNVLinkGroup = "nvlink-group"
	// TypeXGMIGroup is a group of AMD or Hygon GPUs of one XGMI hive, published like an
	// NVLink group (gpuCount, members, counters of every member).
	TypeXGMIGroup = "xgmi-group"
)

// IsGroupType says whether a device type is a group of linked GPUs (an NVLink or an
// XGMI group), whose members attribute lists the GPUs it takes.
func IsGroupType(t string) bool { return t == TypeNVLinkGroup || t == TypeXGMIGroup }

// Attribute names, in the driver's domain (a CEL selector reads
// device.attributes["gpu.gpudra.dev"].uuid).
const (
	AttrType                  = "type"
	AttrIndex                 = "index"
	AttrUUID                  = "uuid"
	AttrProductName           = "productName"
	AttrBrand                 = "brand"
	AttrArchitecture          = "architecture"
	AttrCUDAComputeCapability = "cudaComputeCapability"
	AttrDriverVersion         = "driverVersion"
	AttrCUDADriverVersion     = "cudaDriverVersion"
	AttrMIGCapable            = "migCapable"
	AttrMIGProfile            = "migProfile"
	AttrMIGPlacementStart     = "migPlacementStart"
	AttrMIGPlacementSize      = "migPlacementSize"
	AttrParentIndex           = "parentIndex"
	AttrParentUUID            = "parentUUID"
	AttrNVLinkFabric          = "nvlinkFabric"
	AttrNVLinkLinks           = "nvlinkLinks"
	AttrNVLinkClique          = "nvlinkClique"
	AttrNVLinkDomain          = "nvlinkDomain"
	AttrNVLinkMinLinks        = "nvlinkMinLinks"
	// AttrGPUCount and AttrMembers are a group's size and its GPUs' indices ("0-1-2-3"),
	// on NVLink and XGMI groups alike.
	AttrGPUCount = "gpuCount"
	AttrMembers  = "members"
)

// Attributes of GPUs of every vendor (AMD and Hygon GPUs publish the common ones above too:
// type, index, uuid, productName, migCapable, the standard PCI attributes; and the
// capacities memory, multiprocessors, compute).
const (
	// AttrVendor is VendorNVIDIA, VendorAMD or VendorHygon, on every device.
	AttrVendor = "vendor"
	// AttrLinkDomain has the same value on GPUs that reach each other over a GPU link
	// without PCIe: an NVLink domain ("nvlink-0-1-2-3") or an XGMI hive ("xgmi-<hive id>").
	// A matchAttribute on it keeps a claim's GPUs on one fabric, whatever the vendor.
	AttrLinkDomain = "linkDomain"
)

// Vendors, the values of AttrVendor.
const (
	VendorNVIDIA = "nvidia"
	VendorAMD    = "amd"
	VendorHygon  = "hygon"
)

// VendorName is a vendor as people write it ("NVIDIA", "AMD", "Hygon"); a value not among
// the vendors as it is.
func VendorName(vendor string) string {
	switch vendor {
	case VendorNVIDIA:
		return "NVIDIA"
	case VendorAMD:
		return "AMD"
	case VendorHygon:
		return "Hygon"
	}
	return vendor
}

// Attributes of AMD and Hygon GPUs (read from the kernel's KFD topology and DRM class).
const (
	// AttrGFXTarget is the GPU's ISA as ROCm names it, e.g. "gfx942", "gfx90a".
	AttrGFXTarget = "gfxTarget"
	// AttrComputePartition and AttrMemoryPartition are the GPU's partition modes
	// ("SPX", "DPX", "QPX", "CPX"; "NPS1", "NPS4") where it has them.
	AttrComputePartition = "computePartition"
	AttrMemoryPartition  = "memoryPartition"
	// AttrXGMIHive is the XGMI hive's id (hex); GPUs of one hive are XGMI-connected.
	AttrXGMIHive = "xgmiHive"
	// AttrXGMILinks is how many GPUs this one has a direct XGMI link to.
	AttrXGMILinks = "xgmiLinks"
)

// Capacity names, in the driver's domain.
const (
	CapMemory          = "memory"
	CapMultiprocessors = "multiprocessors"
	CapCompute         = "compute"
)

// Device taints.
const (
	// TaintUnhealthy is put on every device of a GPU the plugin found unhealthy.
	TaintUnhealthy = "gpu.gpudra.dev/unhealthy"
)

// Node labels of the network topology, read by the admission check and the simulator.
const (
	LabelBlock = "topology.gpudra.dev/block"
	LabelRack  = "topology.gpudra.dev/rack"
	LabelToR   = "topology.gpudra.dev/tor"
	// LabelToROversubscription and LabelBlockOversubscription carry the downlink to uplink
	// ratio of a node's ToR and of its block's spine ("3" for 3:1), from the topology file.
	LabelToROversubscription   = "topology.gpudra.dev/tor-oversubscription"
	LabelBlockOversubscription = "topology.gpudra.dev/block-oversubscription"
)

// The Kueue admission check and what it reads from and writes to workloads and pods.
const (
	// AdmissionCheckController is the controllerName of gpudra's AdmissionCheck.
	AdmissionCheckController = "gpudra.dev/topology"
	// AnnotationRequiredTopology keeps all pods of a pod set in one domain: block, rack or hostname.
	AnnotationRequiredTopology = "gpudra.dev/required-topology"
	// AnnotationSliceSize and AnnotationSliceTopology split a pod set into consecutive
	// slices of that many pods that must each share a domain (e.g. pipelines per rack).
	AnnotationSliceSize     = "gpudra.dev/slice-size"
	AnnotationSliceTopology = "gpudra.dev/slice-required-topology"
	// AnnotationSliceNetworkTopology (tor or block), instead of AnnotationSliceTopology,
	// lets the network decide: each slice is kept in one domain of that level as a
	// requirement where its switch's uplinks are oversubscribed, as a preference where
	// they are not.
	AnnotationSliceNetworkTopology = "gpudra.dev/slice-topology"
	// AnnotationSubsliceSize with AnnotationSubsliceTopology or
	// AnnotationSubsliceNetworkTopology split each slice (or, without slices, the pod set)
	// again into consecutive subslices (e.g. tensor-parallel groups per host inside
	// pipelines per ToR).
	AnnotationSubsliceSize            = "gpudra.dev/subslice-size"
	AnnotationSubsliceTopology        = "gpudra.dev/subslice-required-topology"
	AnnotationSubsliceNetworkTopology = "gpudra.dev/subslice-topology"
	// SchedulingGate holds a pod until gpudra pins it to the node its gang was planned on.
	SchedulingGate = "gpudra.dev/placement"
	// AnnotationPlacement lists the planned node of each pod of a pod set, by completion index.
	AnnotationPlacement = "gpudra.dev/placement"
	// LabelPinnedSlot marks pods that were pinned, with their slot in the plan.
	LabelPinnedSlot = "gpudra.dev/pinned-slot"
	// LabelWorkload carries a Workload's UID on the objects the admission check makes for it.
	LabelWorkload = "gpudra.dev/workload-uid"
	// LabelMovable ("true") on a pod lets defragmentation evict it so that it runs again
	// elsewhere; pods without it are never moved.
	LabelMovable = "gpudra.dev/movable"
	// TaintDefragHold (NoSchedule, the Workload's namespace/name as value, "/" as ".") is on
	// the nodes a defragmentation plan frees while it is carried out, so that the evicted
	// pods' replacements do not take the room back before their old claims are released.
	TaintDefragHold = "gpudra.dev/defrag-hold"
)

// Data locality: which datasets a pod reads and which nodes cache them (locality).
const (
	// AnnotationDatasets on a pod or a workload's pod template names the datasets its pods
	// read, comma-separated, each <namespace>/<name> or <name> (the pod's namespace).
	AnnotationDatasets = "gpudra.dev/datasets"
	// LabelDatasetPrefix starts the node label that says the node caches a dataset:
	// dataset.gpudra.dev/<namespace>.<name>, or dataset.gpudra.dev/sha256-<hash> when that
	// name would pass 63 characters (locality.LabelKey).
	LabelDatasetPrefix = "dataset.gpudra.dev/"
)

// Objects the kubelet plugin makes.
const (
	// AnnotationPreparedClaim names, on a CDI spec, the claim it was written for.
	AnnotationPreparedClaim = "gpudra.dev/prepared-claim"
	// LabelMPSNode, LabelMPSClaimUID and AnnotationMPSPipeDir mark an MPS control
	// daemon's Deployment and pods.
	LabelMPSNode         = "gpu.gpudra.dev/mps-node"
	LabelMPSClaimUID     = "gpu.gpudra.dev/mps-claim-uid"
	AnnotationMPSPipeDir = "gpu.gpudra.dev/mps-pipe-dir"
	// AnnotationMPSDaemonSpec is a digest of what an MPS daemon was started with.
	AnnotationMPSDaemonSpec = "gpu.gpudra.dev/mps-daemon-spec"
)

// Names NVIDIA's device plugin advertises, which gpudra's DeviceClasses also carry as
// extendedResourceName (KEP-5004), so that pods written for the device plugin run unchanged:
// kube-scheduler turns a container's nvidia.com/gpu or nvidia.com/mig-<profile> into a claim
// on a node whose allocatable does not list that resource (no device plugin there).
const (
	// ExtendedResourceNVIDIAGPU is a whole GPU: the extendedResourceName of DeviceClassGPU.
	// Kueue charges it as 100 QuotaGPUPercent.
	ExtendedResourceNVIDIAGPU = "nvidia.com/gpu"
	// ExtendedResourceAMDGPU is a whole AMD GPU, AMD's device plugin's name: the
	// extendedResourceName of DeviceClassAMDGPU.
	ExtendedResourceAMDGPU = "amd.com/gpu"
	// ExtendedResourceHygonDCU is a whole Hygon DCU, Hygon's device plugin's name: the
	// extendedResourceName of DeviceClassHygonGPU.
	ExtendedResourceHygonDCU = "hygon.com/dcu"
)

// MIGProfileName is a MIG profile's name as Kubernetes resource and object names spell it,
// the way the device plugin's mixed strategy does: "+" becomes "." ("1g.10gb+me" is
// "1g.10gb.me").
func MIGProfileName(profile string) string {
	b := []byte(profile)
	for i, c := range b {
		if c == '+' {
			b[i] = '.'
		}
	}
	return string(b)
}

// DeviceClassMIGProfile is the DeviceClass of the MIG devices of one profile
// ("mig-1g.10gb.gpudra.dev" selects migProfile == "1g.10gb").
func DeviceClassMIGProfile(profile string) string {
	return "mig-" + MIGProfileName(profile) + ".gpudra.dev"
}

// ExtendedResourceNVIDIAMIG is the extendedResourceName of DeviceClassMIGProfile(profile),
// the device plugin's name for that profile: "nvidia.com/mig-1g.10gb",
// "nvidia.com/mig-1g.10gb.me" for "1g.10gb+me". Kueue charges it as ExtendedResourceMIG.
func ExtendedResourceNVIDIAMIG(profile string) string {
	return "nvidia.com/mig-" + MIGProfileName(profile)
}

// Attributes of share devices on the node's memory oversubscription (the kubelet plugin's
// --memory-oversubscription): every share device carries both.
const (
	// AttrMemoryOversubscribed is true when the share device's memory capacity is more than
	// the card's memory (shares may together ask for more than the card has).
	AttrMemoryOversubscribed = "memoryOversubscribed"
	// AttrMemoryOversubscriptionPercent is the share device's memory capacity in percent
	// of the card's memory: 100 when not oversubscribed, 150 for a factor of 1.5.
	AttrMemoryOversubscriptionPercent = "memoryOversubscriptionPercent"
)

// Declarative MIG layouts (static MIG): a node label names a layout of the file the chart
// installs (the plugin's --mig-layouts), and the plugin reports on the node how applying
// it goes.
const (
	// LabelMIGConfig names the node's MIG layout.
	LabelMIGConfig = "gpu.gpudra.dev/mig-config"
	// LabelMIGConfigState is MIGConfigPending, MIGConfigSuccess or MIGConfigFailed; the
	// plugin sets it, and it is the only thing the plugin may change on its Node.
	LabelMIGConfigState = "gpu.gpudra.dev/mig-config.state"
	// LabelNVIDIAMIGConfig is NVIDIA mig-manager's layout label: a node carrying it has
	// its layout from mig-manager, and gpudra applies none.
	LabelNVIDIAMIGConfig = "nvidia.com/mig.config"

	MIGConfigPending = "pending"
	MIGConfigSuccess = "success"
	MIGConfigFailed  = "failed"
)

package driver

import (
	"github.com/gpudra/gpudra/topology"
)

// Inventory is everything gpudra knows about one node's GPUs. It is plain data:
// discovery fills it from NVML, rendering turns it into ResourceSlices.
type Inventory struct {
	// Backend is where it came from ("nvml" or "sim:<profile>").
	Backend string `json:"backend"`
	// DriverVersion is the NVIDIA kernel driver version, e.g. "550.54.15".
	DriverVersion string `json:"driverVersion"`
	// CUDADriverVersion is the highest CUDA version the driver supports, e.g. "12.4".
	CUDADriverVersion string `json:"cudaDriverVersion"`
	GPUs              []GPU  `json:"gpus"`
	// Unreadable are the GPUs NVML lists but discovery could not read; they are in
	// none of the other fields and none of their devices is published.
	Unreadable []UnreadableGPU `json:"unreadable,omitempty"`
	// NVLink is the NVLink wiring between the GPUs, indexed like GPUs.
	NVLink topology.NVLinkGraph `json:"nvlink"`
	// PCIe[i][j] is the closest PCIe ancestor shared by GPUs i and j (nvidia-smi's PIX, PXB, PHB, NODE, SYS).
	PCIe [][]PCIeLevel `json:"pcie"`
}

// GPU is one physical GPU, or one compute partition of an AMD GPU that the kernel shows
// as a GPU of its own.
type GPU struct {
	Index int `json:"index"`
	// Vendor is VendorNVIDIA, VendorAMD or VendorHygon ("" is NVIDIA: inventories written
	// before AMD GPUs were discovered).
	Vendor string `json:"vendor,omitempty"`
	Minor  int    `json:"minor"`
	UUID   string `json:"uuid"`
	// ProductName is NVML's name, e.g. "NVIDIA H100 80GB HBM3".
	ProductName  string `json:"productName"`
	Brand        string `json:"brand"`
	Architecture string `json:"architecture"`
	// CUDAComputeCapability is "major.minor", e.g. "9.0".
	CUDAComputeCapability string `json:"cudaComputeCapability"`
	MemoryBytes           uint64 `json:"memoryBytes"`
	Multiprocessors       int    `json:"multiprocessors"`
	// PCIBusID is the lower-case extended BDF, e.g. "0000:1a:00.0".
	PCIBusID string `json:"pciBusID"`
	// PCIeRoot is the PCIe root complex, e.g. "pci0000:17" ("" when unknown).
	PCIeRoot string `json:"pcieRoot,omitempty"`
	// NUMANode is the GPU's NUMA node, nil when it has no NUMA affinity.
	NUMANode *int `json:"numaNode,omitempty"`
	// MIG is set for MIG-capable GPUs.
	MIG *MIGInfo `json:"mig,omitempty"`
	// KFD is set for GPUs discovered through the kernel's KFD topology (AMD, Hygon).
	KFD *KFDInfo `json:"kfd,omitempty"`
}

// GPU vendors, the value of the vendor attribute.
const (
	VendorNVIDIA = "nvidia"
	VendorAMD    = "amd"
	VendorHygon  = "hygon"
)

// VendorOf is g's vendor, NVIDIA where the inventory did not say.
func (g *GPU) VendorOf() string {
	if g.Vendor == "" {
		return VendorNVIDIA
	}
	return g.Vendor
}

// IsNVIDIA says whether g is an NVIDIA GPU (NVML's).
func (g *GPU) IsNVIDIA() bool { return g.KFD == nil && g.VendorOf() == VendorNVIDIA }

// KFDInfo is what the kernel's KFD topology and DRM class say about an AMD or Hygon GPU.
type KFDInfo struct {
	// Node is the KFD topology node (/sys/class/kfd/kfd/topology/nodes/<Node>).
	Node int `json:"node"`
	// GPUID is the node's gpu_id, which changes when the GPU goes away and comes back.
	GPUID uint64 `json:"gpuID"`
	// RenderMinor is the DRM render node's minor: /dev/dri/renderD<RenderMinor>.
	RenderMinor int `json:"renderMinor"`
	// Card is the DRM card: /dev/dri/card<Card>; -1 when sysfs shows none.
	Card int `json:"card"`
	// GFXTarget is the ISA, e.g. "gfx942".
	GFXTarget string `json:"gfxTarget"`
	// ComputePartition and MemoryPartition are the GPU's partition modes ("SPX", "CPX";
	// "NPS1", "NPS4"), "" where the GPU has none.
	ComputePartition string `json:"computePartition,omitempty"`
	MemoryPartition  string `json:"memoryPartition,omitempty"`
	// Partition is this device's place among the KFD nodes of one physical GPU (0 for a
	// GPU that is not partitioned); Partitions is how many there are.
	Partition  int `json:"partition"`
	Partitions int `json:"partitions"`
	// XGMIHive is the XGMI hive's id in hex, "" when the GPU is in none.
	XGMIHive string `json:"xgmiHive,omitempty"`
	// XGMIPeers are the indices of the GPUs this one has a direct XGMI link to (one hop).
	XGMIPeers []int `json:"xgmiPeers,omitempty"`
	// WholeUUID is true when UUID is the physical GPU's own unique id, as ROCm's
	// ROCR_VISIBLE_DEVICES accepts it (false for partitions and GPUs without one).
	WholeUUID bool `json:"wholeUUID,omitempty"`
}

// migMode says whether the GPU's MIG mode is enabled.
func (g *GPU) migMode() bool { return g.MIG != nil && g.MIG.Enabled }

// MIGInfo describes a MIG-capable GPU's partitioning options.
type MIGInfo struct {
	// Enabled is the GPU's current MIG mode.
	Enabled bool `json:"enabled"`
	// MemorySlices is the number of memory slices (8 on A100/H100); placements index them.
	MemorySlices int          `json:"memorySlices"`
	Profiles     []MIGProfile `json:"profiles"`
	// Instances are the MIG devices that exist on the GPU (made by NVIDIA's mig-manager,
	// an admin or the plugin), ordered by placement start, then compute instance id.
	Instances []MIGInstance `json:"instances,omitempty"`
}

// MIGInstance is a MIG device that exists: a GPU instance and one of its compute instances.
type MIGInstance struct {
	// Profile is the MIG profile's name, e.g. "1g.10gb"; a compute instance smaller than
	// its GPU instance has the longer name, e.g. "1c.3g.40gb".
	Profile     string `json:"profile"`
	GIProfileID int    `json:"giProfileID"`
	CIProfileID int    `json:"ciProfileID"`
	// Full says the compute instance uses all of its GPU instance (Profile is then one of
	// the GPU's Profiles).
	Full      bool         `json:"full"`
	Placement MIGPlacement `json:"placement"`
	// GIID and CIID are NVML's GPU and compute instance ids.
	GIID int `json:"giID"`
	CIID int `json:"ciID"`
	// UUID is the MIG device's UUID ("MIG-..."), as NVIDIA_VISIBLE_DEVICES takes it.
	UUID            string `json:"uuid"`
	MemoryBytes     uint64 `json:"memoryBytes"`
	Multiprocessors int    `json:"multiprocessors"`
}

// MIGProfile is one GPU-instance profile with a full compute instance, e.g. 1g.10gb.
type MIGProfile struct {
	// Name is NVIDIA's canonical name, e.g. "1g.10gb" or "1g.10gb+me".
	Name string `json:"name"`
	// GIProfileID and CIProfileID are NVML's profile ids.
	GIProfileID     int    `json:"giProfileID"`
	CIProfileID     int    `json:"ciProfileID"`
	ComputeSlices   int    `json:"computeSlices"`
	MemoryBytes     uint64 `json:"memoryBytes"`
	Multiprocessors int    `json:"multiprocessors"`
	// Placements are where an instance of this profile can sit, in memory slices.
	Placements []MIGPlacement `json:"placements"`
	// MaxInstances is how many instances of this profile a GPU can hold at once (NVML's
	// instance count): 1 for the profiles with the media engines ("1g.10gb+me"), though
	// they have a placement on every slice. 0 means unknown.
	MaxInstances int `json:"maxInstances,omitempty"`
}

// InstanceLimit is how many instances of the profile a GPU can hold at once: MaxInstances,
// else (unknown) one per placement.
func (p MIGProfile) InstanceLimit() int {
	if p.MaxInstances > 0 {
		return min(p.MaxInstances, len(p.Placements))
	}
	return len(p.Placements)
}

// MIGPlacement is a GPU instance position: memory slices [Start, Start+Size).
type MIGPlacement struct {
	Start int `json:"start"`
	Size  int `json:"size"`
}

// PCIeLevel is how close two GPUs are on PCIe, in nvidia-smi topo -m terms.
type PCIeLevel string

// PCIe levels, closest first.
const (
	PCIeSame       PCIeLevel = "X"
	PCIeSwitch     PCIeLevel = "PIX"  // one PCIe switch
	PCIeSwitches   PCIeLevel = "PXB"  // several PCIe switches, no host bridge
	PCIeHostBridge PCIeLevel = "PHB"  // same PCIe host bridge (root complex)
	PCIeNUMANode   PCIeLevel = "NODE" // host bridges of one NUMA node
	PCIeSystem     PCIeLevel = "SYS"  // across NUMA nodes (SMP interconnect)
)

// GPU returns the GPU with the given index, or nil.
func (inv *Inventory) GPU(index int) *GPU {
	for k := range inv.GPUs {
		if inv.GPUs[k].Index == index {
			return &inv.GPUs[k]
		}
	}
	return nil
}

// UnreadableGPU is a GPU that NVML lists but discovery could not read. None of its
// devices is published; the kubelet plugin reports it in its log, metrics and an Event
// on the Node.
type UnreadableGPU struct {
	// Index is the GPU's NVML index.
	Index int `json:"index"`
	// Call is the NVML call that failed, e.g. "GetMemoryInfo" ("" when NVML answered
	// but the answer made no sense).
	Call string `json:"call,omitempty"`
	// Return is the call's NVML return code, e.g. "ERROR_GPU_IS_LOST".
	Return string `json:"return,omitempty"`
	// Reason is the whole error.
	Reason string `json:"reason"`
}

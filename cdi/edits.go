package cdi

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// Container paths gpudra mounts into workloads.
const (
	VGPULibraryPath = "/usr/local/vgpu/libvgpu.so"
	// VGPUPreloadPath is where a HAMi-core share's preload file (VGPUPreload) is
	// mounted: the dynamic loader reads it for every process, whatever its environment.
	VGPUPreloadPath = "/etc/ld.so.preload"
	VGPUCacheDir    = "/tmp/vgpu"
	MPSPipeDir      = "/tmp/nvidia-mps"
	MPSLogDir       = "/var/log/nvidia-mps"
	MPSShmDir       = "/dev/shm"
)

// VGPUPreload is the content of a claim's preload file (Device.PreloadFile): the
// container path of libvgpu.so, which the loader then maps into every dynamically linked
// process of the container.
const VGPUPreload = VGPULibraryPath + "\n"

// Node says where this node's GPU device files and enforcement helpers are.
type Node struct {
	// DriverRoot is the host directory under which /dev/nvidia* and /proc/driver/nvidia*
	// are found: "/" on a GPU node, a directory the lab prepares with a simulated backend.
	DriverRoot string
	// ContainerDriverRoot is where this process sees DriverRoot when it runs in a
	// container that mounts it elsewhere (DriverOptions.ContainerRoot); "" is DriverRoot.
	ContainerDriverRoot string
	// VGPULibrary is the host path of HAMi-core's libvgpu.so; "" when not installed.
	VGPULibrary string
	// Driver, when set, gives the GPU parts of the specs (device nodes, driver libraries
	// and binaries, hooks) from nvcdi; nil: gpudra writes the device nodes only.
	Driver *Driver
}

// GPU is one physical GPU as the container sees it.
type GPU struct {
	Index int
	Minor int
	UUID  string
	// AMD is set for AMD and Hygon GPUs (the kernel's KFD), which have no /dev/nvidia<Minor>.
	AMD *AMDNodes `json:",omitempty"`
}

// AMDNodes are an AMD or Hygon GPU's device files: /dev/dri/renderD<RenderMinor> and
// /dev/dri/card<Card> (none when Card < 0), beside /dev/kfd, which every ROCm process opens.
type AMDNodes struct {
	RenderMinor int
	Card        int
	// ROCmUUID says UUID is the GPU's own unique id, as ROCR_VISIBLE_DEVICES takes it
	// (false for compute partitions and GPUs without one).
	ROCmUUID bool `json:",omitempty"`
}

// KFDPath is the device file through which ROCm talks to every AMD GPU.
const KFDPath = "/dev/kfd"

// hasNVIDIA says whether any of devs uses an NVIDIA GPU (a MIG device, or a GPU that is
// not AMD's), which needs NVIDIA's control device files.
func hasNVIDIA(devs []Device) bool {
	for _, d := range devs {
		if d.MIG != nil {
			return true
		}
		for _, g := range d.GPUs {
			if g.AMD == nil {
				return true
			}
		}
	}
	return false
}

// allAMD says whether every one of devs uses AMD GPUs only.
func allAMD(devs []Device) bool {
	return len(devs) > 0 && !slices.ContainsFunc(devs, func(d Device) bool { return !d.amdOnly() })
}

// amdOnly says whether dev uses AMD GPUs only.
func (d Device) amdOnly() bool { return d.MIG == nil && len(d.GPUs) > 0 && !hasNVIDIA([]Device{d}) }

// rocrVisible is ROCR_VISIBLE_DEVICES for a claim's devices: the UUIDs of its AMD GPUs,
// in order, which ROCm's runtime takes in place of indices; "" when one of them has no
// UUID ROCm knows (a compute partition), and then only the device files decide what the
// container sees.
func rocrVisible(devs []Device) string {
	var ids []string
	for _, d := range devs {
		for _, g := range d.GPUs {
			if g.AMD == nil {
				continue
			}
			if !g.AMD.ROCmUUID {
				return ""
			}
			ids = append(ids, g.UUID)
		}
	}
	return strings.Join(ids, ",")
}

// MIG is a MIG device: a GPU instance with one compute instance on Parent.
type MIG struct {
	Parent GPU
	GI, CI int
	// UUID is the MIG device's identifier, as GPUDRA_VISIBLE_DEVICES lists it.
	UUID string
	// GICapMinor and CICapMinor are the minors of /dev/nvidia-caps/nvidia-cap<N>.
	GICapMinor, CICapMinor int
}

// Limits is a share's enforced capacity, with the HAMi-core or MPS mechanism.
type Limits struct {
	MemoryMiB int64
	// ComputePercent caps SMs; 0 means no cap.
	ComputePercent int
	// HAMi selects HAMi-core (libvgpu.so preloaded by the loader); false selects MPS limits.
	HAMi bool
	// Policy is the share's tier (Fixed, Guaranteed, BestEffort); "" is Fixed.
	Policy string `json:",omitempty"`
	// Priority is High, Low or "" (the mechanism's normal priority).
	Priority string `json:",omitempty"`
	// CUDAIndex, when set, is the CUDA index of the share's GPU in the claim's containers,
	// decided at prepare from every gpudra claim they get on the node; nil: the GPU's
	// place among the claim's own devices.
	CUDAIndex *int `json:",omitempty"`
	// Oversubscribed: the node oversubscribes GPU memory, so the shares of a GPU may
	// together hold more than the card has. HAMi-core then gets CUDA_OVERSUBSCRIBE=true,
	// its virtual device memory; MPS cannot enforce such a share.
	Oversubscribed bool `json:",omitempty"`
}

// HAMi-core's and MPS's priority values: HAMi-core's CUDA_TASK_PRIORITY is 0 for high
// and 1 for low; MPS's CUDA_MPS_CLIENT_PRIORITY is 0 for normal and 1 for below normal.
func priorityValue(p string) (string, bool) {
	switch p {
	case "High":
		return "0", true
	case "Low":
		return "1", true
	}
	return "", false
}

// MPS is a per-claim MPS control daemon's directories and client limits.
type MPS struct {
	// PipeDir and LogDir are host directories for this claim's daemon.
	PipeDir, LogDir string
	// ShmDir is the claim's host directory mounted at /dev/shm (MPSShmDir) in its
	// containers, as it is in its daemon's: MPS clients and the MPS server share POSIX
	// shared memory there as well as the pipe directory's sockets, so a client that sees
	// its pod's own /dev/shm cannot work with the daemon. "" in records of claims
	// prepared before gpudra gave each claim one: their containers keep the pod's.
	ShmDir string
	// ActiveThreadPercent caps each client's SMs; 0 means no cap.
	ActiveThreadPercent int
	// PinnedMemoryMiB caps each client's device memory; 0 means no cap.
	PinnedMemoryMiB int64
	// Priority is the clients' priority: High, Low or "" (normal).
	Priority string `json:",omitempty"`
}

// Device is one CDI device of a claim.
type Device struct {
	// Name is unique in the claim's spec: "<claimUID>-<device>[-<shareID>]".
	Name string
	// Device is the published device name (gpu-0, gpu-0-share, gpu-0-mig-1g10gb-0, nvlink-0-1).
	Device string
	// GPUs are the whole GPUs (one for a GPU or share, the members of an NVLink group).
	GPUs []GPU
	// MIG is set for MIG devices (then GPUs is empty).
	MIG *MIG
	// MemoryBytes is the memory the workload may use; ComputePercent its share of SMs.
	MemoryBytes    int64
	ComputePercent int
	// Limits is set for shares; MPS when the claim runs under MPS.
	Limits *Limits
	MPS    *MPS
	// CacheDir is the host directory for HAMi-core's shared cache (shares under HAMi).
	CacheDir string
	// PreloadFile is the host path of the claim's preload file (content VGPUPreload),
	// mounted read-only at VGPUPreloadPath (shares under HAMi). "" in records of claims
	// prepared before gpudra mounted one: their containers keep LD_PRELOAD.
	PreloadFile string
	// TimeSlice is the time-slicing interval, reported to the workload ("" under MPS).
	TimeSlice string
}

// uuids is what GPUDRA_VISIBLE_DEVICES lists for the device.
func (d Device) uuids() []string {
	if d.MIG != nil {
		return []string{d.MIG.UUID}
	}
	out := make([]string, len(d.GPUs))
	for k, g := range d.GPUs {
		out[k] = g.UUID
	}
	return out
}

// VisibleDevicesGuard is in every spec, as nvcdi and NVIDIA's DRA driver write it: the
// NVIDIA Container Runtime, where a node runs it, reads NVIDIA_VISIBLE_DEVICES from the
// container's environment and would inject the devices it names a second time (jit-cdi
// and cdi modes as CDI devices, legacy mode through nvidia-container-cli), or every GPU
// for a CUDA image's NVIDIA_VISIBLE_DEVICES=all; "void" asks it for none. The workload
// learns its devices from GPUDRA_VISIBLE_DEVICES.
const VisibleDevicesGuard = "NVIDIA_VISIBLE_DEVICES=void"

// SpecEdits are the edits of the whole spec: nvcdi's common edits when it found a
// driver, else the control device nodes; and VisibleDevicesGuard.
func (n Node) SpecEdits() cdispec.ContainerEdits {
	return n.specEdits(true)
}

// specEdits are SpecEdits, without NVIDIA's control device files and nvcdi's edits when
// nvidia is false (a claim of AMD GPUs only: a node without NVIDIA GPUs has none).
func (n Node) specEdits(nvidia bool) cdispec.ContainerEdits {
	if !nvidia {
		return cdispec.ContainerEdits{Env: []string{VisibleDevicesGuard}}
	}
	e := cdispec.ContainerEdits{DeviceNodes: n.ControlNodes()}
	if n.Driver != nil && n.Driver.Common() != nil {
		e = merged(cdispec.ContainerEdits{}, *n.Driver.Common())
	}
	e.Env = append(e.Env, VisibleDevicesGuard)
	return e
}

// DeviceEdits are dev's edits: own (from ClaimEdits) with its device nodes replaced by
// nvcdi's device nodes and hooks when nvcdi describes the device.
func (n Node) DeviceEdits(dev Device, own cdispec.ContainerEdits) (cdispec.ContainerEdits, error) {
	if n.Driver == nil || dev.amdOnly() {
		return own, nil
	}
	gpu, err := n.Driver.deviceEdits(dev)
	if err != nil || gpu == nil {
		return own, err
	}
	own.DeviceNodes = nil
	return merged(*gpu, own), nil
}

// ControlNodes are the device nodes every GPU container needs.
func (n Node) ControlNodes() []*cdispec.DeviceNode {
	return []*cdispec.DeviceNode{n.node("/dev/nvidiactl"), n.node("/dev/nvidia-uvm"), n.node("/dev/nvidia-uvm-tools")}
}

func (n Node) node(path string) *cdispec.DeviceNode {
	return &cdispec.DeviceNode{Path: path, HostPath: filepath.Join(n.root(), path)}
}

func (n Node) root() string {
	if n.DriverRoot == "" {
		return "/"
	}
	return n.DriverRoot
}

// ClaimEnvPrefix begins the names of the variables that describe the claim named claim
// (ClaimEdits): GPUDRA_CLAIM_ and the name in upper case, every character other than a
// letter or digit an underscore ("train-gpus" → GPUDRA_CLAIM_TRAIN_GPUS_).
func ClaimEnvPrefix(claim string) string {
	b := []byte(strings.ToUpper(claim))
	for k, c := range b {
		if (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			b[k] = '_'
		}
	}
	return "GPUDRA_CLAIM_" + string(b) + "_"
}

// ClaimEdits computes the container edits of each device of one claim. Variables that
// describe the whole claim (GPUDRA_VISIBLE_DEVICES: the UUIDs of its GPUs and MIG
// devices; GPUDRA_DEVICES: its device names) carry the same value on every device, so a
// container given several of the claim's devices sees no conflict; per-GPU variables are
// suffixed with the GPU's position k in GPUDRA_VISIBLE_DEVICES (HAMi-core's caps are
// numbered by CUDA index instead: hamiLimitsOf). A container given several claims gets these
// variables from one of them (the runtime applies the claims' specs in turn, and the
// last value of a variable wins), so each claim also sets the same facts under names of
// its own, ClaimEnvPrefix(claim) + VISIBLE_DEVICES, DEVICES, MEMORY_MIB and
// COMPUTE_PERCENT (comma-separated, in the order of its VISIBLE_DEVICES), unless claim
// is "". No device sets NVIDIA_VISIBLE_DEVICES: a device's value would replace the
// spec's guard (SpecEdits).
func (n Node) ClaimEdits(claim string, devs []Device) []cdispec.ContainerEdits {
	// all, mems and computes: per GPU, in GPUDRA_VISIBLE_DEVICES order.
	var all, names, mems, computes []string
	first := make([]int, len(devs)) // position of each device's first GPU
	for i, d := range devs {
		first[i] = len(all)
		all = append(all, d.uuids()...)
		names = append(names, d.Device)
		for range d.uuids() {
			mems = append(mems, strconv.FormatInt(d.MemoryBytes>>20, 10))
			computes = append(computes, strconv.Itoa(d.ComputePercent))
		}
	}
	var own []string
	if claim != "" {
		prefix := ClaimEnvPrefix(claim)
		own = []string{
			prefix + "VISIBLE_DEVICES=" + strings.Join(all, ","),
			prefix + "DEVICES=" + strings.Join(names, ","),
			prefix + "MEMORY_MIB=" + strings.Join(mems, ","),
			prefix + "COMPUTE_PERCENT=" + strings.Join(computes, ","),
		}
	}
	hami := hamiLimitsOf(devs)
	out := make([]cdispec.ContainerEdits, len(devs))
	for i, d := range devs {
		e := &out[i]
		e.Env = append([]string{
			"GPUDRA_VISIBLE_DEVICES=" + strings.Join(all, ","),
			"GPUDRA_DEVICES=" + strings.Join(names, ","),
		}, own...)
		for k := range d.uuids() {
			pos := first[i] + k
			e.Env = append(e.Env,
				"GPUDRA_MEMORY_MIB_"+strconv.Itoa(pos)+"="+mems[pos],
				"GPUDRA_COMPUTE_PERCENT_"+strconv.Itoa(pos)+"="+computes[pos])
		}
		if l := d.Limits; l != nil {
			policy := l.Policy
			if policy == "" {
				policy = "Fixed"
			}
			limit := l.ComputePercent
			if limit == 0 {
				limit = 100 // no cap
			}
			e.Env = append(e.Env,
				"GPUDRA_SHARE_POLICY_"+strconv.Itoa(first[i])+"="+policy,
				"GPUDRA_COMPUTE_LIMIT_"+strconv.Itoa(first[i])+"="+strconv.Itoa(limit))
			if l.Priority != "" {
				e.Env = append(e.Env, "GPUDRA_SHARE_PRIORITY_"+strconv.Itoa(first[i])+"="+l.Priority)
			}
		}
		if d.TimeSlice != "" {
			e.Env = append(e.Env, "GPUDRA_TIMESLICE="+d.TimeSlice)
		}
		for _, g := range d.GPUs {
			if a := g.AMD; a != nil {
				if !slices.ContainsFunc(e.DeviceNodes, func(dn *cdispec.DeviceNode) bool { return dn.Path == KFDPath }) {
					e.DeviceNodes = append(e.DeviceNodes, n.node(KFDPath))
				}
				e.DeviceNodes = append(e.DeviceNodes, n.node(fmt.Sprintf("/dev/dri/renderD%d", a.RenderMinor)))
				if a.Card >= 0 {
					e.DeviceNodes = append(e.DeviceNodes, n.node(fmt.Sprintf("/dev/dri/card%d", a.Card)))
				}
				continue
			}
			e.DeviceNodes = append(e.DeviceNodes, n.node(fmt.Sprintf("/dev/nvidia%d", g.Minor)))
		}
		if d.amdOnly() {
			if v := rocrVisible(devs); v != "" {
				e.Env = append(e.Env, "ROCR_VISIBLE_DEVICES="+v)
			}
		}
		if m := d.MIG; m != nil {
			e.DeviceNodes = append(e.DeviceNodes,
				n.node(fmt.Sprintf("/dev/nvidia%d", m.Parent.Minor)),
				n.node(fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", m.GICapMinor)),
				n.node(fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", m.CICapMinor)))
		}
		if l := d.Limits; l != nil && l.HAMi {
			n.hamiEdits(e, d, hami.of(d))
		}
		if d.MPS != nil {
			mpsEdits(e, d, first[i])
		}
	}
	return out
}

// hamiEdits enforce a share with HAMi-core: the memory and SM caps of the share's GPU
// (limits: what all the claim's HAMi-core shares of that GPU add up to), the shared
// cache, and libvgpu.so mounted and listed in the claim's preload file, mounted read-only
// at VGPUPreloadPath. Two shares of one GPU in the claim set the same caps, so a container
// given both sees no conflict.
func (n Node) hamiEdits(e *cdispec.ContainerEdits, d Device, limits []hamiLimit) {
	l := d.Limits
	e.Env = append(e.Env, "CUDA_DEVICE_ORDER=PCI_BUS_ID")
	for _, h := range limits {
		e.Env = append(e.Env, fmt.Sprintf("CUDA_DEVICE_MEMORY_LIMIT_%d=%dm", h.index, h.memoryMiB))
		if h.computePercent > 0 {
			e.Env = append(e.Env, fmt.Sprintf("CUDA_DEVICE_SM_LIMIT_%d=%d", h.index, h.computePercent))
		}
	}
	if l.Oversubscribed {
		e.Env = append(e.Env, "CUDA_OVERSUBSCRIBE=true")
	}
	if v, ok := priorityValue(l.Priority); ok {
		e.Env = append(e.Env, "CUDA_TASK_PRIORITY="+v)
	}
	if d.CacheDir != "" {
		e.Env = append(e.Env, "CUDA_DEVICE_MEMORY_SHARED_CACHE="+VGPUCacheDir+"/"+d.Name+".cache")
		e.Mounts = append(e.Mounts, &cdispec.Mount{HostPath: d.CacheDir, ContainerPath: VGPUCacheDir, Options: []string{"rbind", "rw"}})
	}
	if n.VGPULibrary == "" {
		return
	}
	e.Mounts = append(e.Mounts, &cdispec.Mount{HostPath: n.VGPULibrary, ContainerPath: VGPULibraryPath, Options: []string{"ro", "nosuid", "nodev", "rbind"}})
	if d.PreloadFile == "" {
		e.Env = append(e.Env, "LD_PRELOAD="+VGPULibraryPath)
		return
	}
	e.Mounts = append(e.Mounts, &cdispec.Mount{HostPath: d.PreloadFile, ContainerPath: VGPUPreloadPath, Options: []string{"ro", "nosuid", "nodev", "rbind"}})
}

// mpsEdits connect the container to the claim's MPS daemon and set its client limits.
func mpsEdits(e *cdispec.ContainerEdits, d Device, pos int) {
	m := d.MPS
	e.Env = append(e.Env, "CUDA_MPS_PIPE_DIRECTORY="+MPSPipeDir, "CUDA_MPS_LOG_DIRECTORY="+MPSLogDir)
	if m.ActiveThreadPercent > 0 {
		e.Env = append(e.Env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="+strconv.Itoa(m.ActiveThreadPercent))
	}
	if v, ok := priorityValue(m.Priority); ok {
		e.Env = append(e.Env, "CUDA_MPS_CLIENT_PRIORITY="+v)
	}
	if m.PinnedMemoryMiB > 0 {
		var limits []string
		for k := range d.uuids() {
			limits = append(limits, fmt.Sprintf("%d=%dM", pos+k, m.PinnedMemoryMiB))
		}
		e.Env = append(e.Env, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="+strings.Join(limits, ","))
	}
	e.Mounts = append(e.Mounts,
		&cdispec.Mount{HostPath: m.PipeDir, ContainerPath: MPSPipeDir, Options: []string{"rbind", "rw"}},
		&cdispec.Mount{HostPath: m.LogDir, ContainerPath: MPSLogDir, Options: []string{"rbind", "rw"}})
	if m.ShmDir != "" {
		// Replaces the runtime's /dev/shm (a CDI mount replaces any mount at its path),
		// as NVIDIA's DRA driver mounts its per-claim MPS shm directory.
		e.Mounts = append(e.Mounts, &cdispec.Mount{HostPath: m.ShmDir, ContainerPath: MPSShmDir, Options: []string{"rbind", "rw", "nosuid", "nodev"}})
	}
}

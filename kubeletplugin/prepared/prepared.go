// Package prepared holds the claims as the kubelet plugin prepared them on this node:
// each claim's devices, MIG instances and MPS daemon, and where the claim is in its
// prepare/unprepare life. The plugin's subsystems (the checkpoint, MPS, usage, health)
// read these types; the package imports none of them.
package prepared

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/cdi"
)

// State is where a claim is in its prepare/unprepare life.
type State string

// Claim states. A claim in PrepareStarted or UnprepareStarted when the plugin starts was
// interrupted: the first is rolled back (the kubelet retries the prepare), the second
// is finished (the kubelet's retried unprepare then finds nothing to do).
const (
	PrepareStarted   State = "PrepareStarted"
	PrepareCompleted State = "PrepareCompleted"
	UnprepareStarted State = "UnprepareStarted"
)

// Claim is one claim as prepared on this node. The checkpoint records it in a format of
// its own, converted from and to this type.
type Claim struct {
	UID       types.UID
	Namespace string
	Name      string
	// PodClaimName is the pod's name for a claim made from its template (the claim's
	// resource.kubernetes.io/pod-claim-name annotation); "" for other claims.
	PodClaimName string
	State        State
	Devices      []Device
	// MPS is the claim's MPS control daemon once started; nil when it has none.
	MPS *MPSDaemon
	// TimeSlicesLeft are the UUIDs of the GPUs whose time-slices the claim's unprepare or
	// rollback has still to give back, once it has released all else the claim held:
	// Devices and MPS are empty then, and the claim's devices free for other claims.
	TimeSlicesLeft []string
}

// Device is one allocated device of a claim as prepared on this node.
type Device struct {
	Request string
	Pool    string
	// Device is the published device name.
	Device  string
	ShareID string
	// Type is the device's type attribute (gpu, share, mig, nvlink-group).
	Type string
	// GPUs are the indices of the physical GPUs it uses (the parent, for MIG).
	GPUs []int
	// MIG is set for MIG devices: the instance to create and, once created, its ids.
	MIG *MIGInstance
	// CDI is what the device's CDI entry is built from.
	CDI cdi.Device
}

// MIGInstance is a MIG device's GPU instance at a fixed placement, with a full
// compute instance.
type MIGInstance struct {
	Parent      int
	Profile     string
	GIProfileID int
	CIProfileID int
	Start       int
	Size        int
}

// MPSDaemon is one claim's MPS control daemon: where it listens, the devices it serves
// and the limits it gives its clients by default. As JSON it is an mps.Simulated daemon's
// file; the checkpoint records it in a format of its own.
type MPSDaemon struct {
	// PipeDir and LogDir are its CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY
	// (host paths; the claim's containers mount them).
	PipeDir string `json:"pipeDir"`
	LogDir  string `json:"logDir"`
	// ShmDir is the claim's shm directory (cdi.MPS.ShmDir), which the daemon sees as its
	// /dev/shm, as the claim's containers do; "" (a claim recorded before claims had
	// one): the plugin's /dev/shm.
	ShmDir string `json:"shmDir,omitempty"`
	// Devices is its CUDA_VISIBLE_DEVICES: the UUIDs of the claim's GPUs or MIG devices
	// that run under MPS, in the claim's order.
	Devices []string `json:"devices"`
	// ActiveThreadPercent is set with set_default_active_thread_percentage; 0: no cap.
	ActiveThreadPercent int `json:"activeThreadPercent,omitempty"`
	// PinnedMemoryMiB is set with set_default_device_pinned_mem_limit for each device,
	// by its position in Devices; 0: no cap.
	PinnedMemoryMiB []int64 `json:"pinnedMemoryMiB,omitempty"`
	// PID is the daemon's process id when it was started (for people reading the
	// checkpoint; the plugin finds a daemon by its pipe directory).
	PID int `json:"pid,omitempty"`
}

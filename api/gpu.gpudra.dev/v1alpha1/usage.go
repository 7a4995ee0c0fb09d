package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// DeviceUsage is the data the kubelet plugin writes in a claim's status.devices entry for
// each of its devices: what the claim's processes use there. A claim's processes are
// attributed to the claim, not to one of its devices: two devices of a claim on one GPU
// show the same use.
type DeviceUsage struct {
	// MemoryUsedBytes is the memory the claim's processes use on the device's GPUs,
	// absent where NVML has no value for a process's memory; MemoryLimitBytes the memory
	// the device holds (the share's, or the device's).
	MemoryUsedBytes  *int64 `json:"memoryUsedBytes,omitempty"`
	MemoryLimitBytes int64  `json:"memoryLimitBytes"`
	// SMUtilizationPercent is their SM utilization in percent of a GPU; absent where
	// NVML does not sample it (MIG).
	SMUtilizationPercent *int `json:"smUtilizationPercent,omitempty"`
	// ComputeGuaranteePercent and ComputeCapPercent are a share's reserved and most
	// compute, in percent of the GPU; absent for other devices.
	ComputeGuaranteePercent *int `json:"computeGuaranteePercent,omitempty"`
	ComputeCapPercent       *int `json:"computeCapPercent,omitempty"`
	// HeldBackSeconds is, for a Low-priority share enforced by HAMi-core, how long its
	// processes were held back by a busy High-priority share of its GPU since it was
	// prepared (gpudra_plugin_claim_held_back_seconds_total); absent for other devices.
	HeldBackSeconds *int64 `json:"heldBackSeconds,omitempty"`
	// Processes counts the claim's compute processes on the device's GPUs.
	Processes  int         `json:"processes"`
	ObservedAt metav1.Time `json:"observedAt"`
}

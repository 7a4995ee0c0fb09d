// Package kubeletplugin is gpudra's DRA kubelet plugin: it publishes the node's
// ResourceSlices from the device model and prepares and unprepares allocated claims
// for the kubelet, built on k8s.io/dynamic-resource-allocation/kubeletplugin.
//
// Preparing a claim resolves each allocated device (whole GPU, share, MIG, NVLink
// group), applies its gpu.gpudra.dev/v1alpha1 configuration, creates MIG instances,
// sets GPU time-slices (TimeSlicer), starts the claim's MPS control daemon (MPSControl)
// and writes one CDI spec (its GPU parts from nvcdi reading the driver root,
// cdi.Driver); a versioned, checksummed checkpoint (claim states PrepareStarted /
// PrepareCompleted / UnprepareStarted of package prepared, node boot id) lets a restarted plugin roll back
// or finish interrupted work, so no MIG instance, MPS daemon or CDI spec leaks. Each
// state change is one checksummed line appended to the checkpoint's journal
// (checkpoint.journal); checkpoint.json is rewritten only when the journal outgrows it,
// and at start-up (package checkpoint). Claims under MPS take a spare, new directory tree
// made at start-up or by an earlier unprepare (spares.go), with a shm directory that is
// /dev/shm in the claim's containers and its daemon's own mount namespace (package mps).
// A prepare that fails undoes only what it made: a MIG instance it did not create is left
// alone (a placement already occupied is refused). A prepared claim is never rolled back
// at start-up: what cannot be restored (its daemon, its time-slices), or a daemon that
// exits later, is repaired in the background with back-off (repair.go). The kubelet's
// calls run side by side (kubeletplugin.Serialize(false)): each claim's lock orders the
// calls on one claim, and the node's lock is held only for short steps, never while a
// daemon's pod starts or stops, nor while nvidia-smi sets a GPU's time-slice (but at
// start-up); each GPU's lock orders the changes of its time-slice (timeslice.go). Claim
// UIDs must be DNS-1123 labels, as Kubernetes' UUIDs are, since they name the claim's
// files (claim.go).
//
// Health: NVML events (XID critical errors except application XIDs, double-bit ECC,
// GPU unavailable or lost) mark a GPU unhealthy; every device using it is republished
// with the gpu.gpudra.dev/unhealthy taint and reported Unhealthy on the kubelet's
// health stream. Simulated backends take injected events (nvmlsim.Inject, or lines
// written to the injection file). Metrics are gpudra_plugin_* (see metrics.go).
//
// Usage: package usage samples what the prepared claims' processes use, reading the
// claims through usage.Node (state.Prepared); it serves the per-claim usage metrics, and
// the claims' status.devices entries carry it (claimstatus.go).
package kubeletplugin

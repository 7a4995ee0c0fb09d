// Package kubeletplugin is gpudra's DRA kubelet plugin: it publishes the node's
// ResourceSlices from the device model and prepares and unprepares allocated claims
// for the kubelet, built on k8s.io/dynamic-resource-allocation/kubeletplugin.
//
// Preparing a claim resolves each allocated device (whole GPU, share, MIG, NVLink
// group), applies its gpu.gpudra.dev/v1alpha1 configuration, creates MIG instances and
// writes one CDI spec; a versioned, checksummed checkpoint (PrepareStarted /
// PrepareCompleted / UnprepareStarted, node boot id) lets a restarted plugin roll back
// or finish interrupted work, so no MIG instance or CDI spec leaks.
package kubeletplugin

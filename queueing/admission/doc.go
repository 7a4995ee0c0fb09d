// Package admission is the Kueue AdmissionCheck controller "gpudra.dev/topology": after
// Kueue reserves quota for a Workload, it asks the real DRA allocator over the live
// ResourceSlices and allocations whether the whole gang fits inside the network domains
// its pod sets require, pins the chosen rack or block through podSetUpdates, or answers
// Retry with a message that says what did not fit. Capacity exports the free GPUs and
// NVLink groups of the same live cluster view as Prometheus gauges.
package admission

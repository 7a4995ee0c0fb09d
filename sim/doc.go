// Package sim replays the Alibaba GPU traces through the placement policies (sim/reproduction) with
// Kubernetes' real structured DRA allocator on the path: every node becomes a gpudra
// Inventory rendered into ResourceSlices, every GPU pod a ResourceClaim as a user
// writes it, and every placement the policy chooses is confirmed (and, in DRA mode,
// decided inside the node) by the allocator. It also writes the CSV and SVG reports.
package sim

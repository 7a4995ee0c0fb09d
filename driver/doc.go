// Package driver is gpudra's device model: it discovers GPUs through the NVML seam
// (real go-nvml, or a simulated server behind the same interface), builds an
// Inventory, and renders it as the resource.k8s.io/v1 ResourceSlices a node
// publishes — whole GPUs, shares, MIG partitions and NVLink groups.
package driver

// DriverName is the DRA driver name and the domain of every gpudra attribute.
const DriverName = "gpu.gpudra.dev"

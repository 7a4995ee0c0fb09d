// Package driver is gpudra's device model: an Inventory of a node's GPUs (what discovery
// read through NVML) and its rendering as the resource.k8s.io/v1 ResourceSlices a node
// publishes: whole GPUs, shares, MIG partitions and NVLink groups. It links no NVML code;
// driver/discover fills an Inventory from go-nvml's interface.
package driver

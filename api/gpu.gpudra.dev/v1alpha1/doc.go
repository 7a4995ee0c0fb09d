// Package v1alpha1 is gpudra's public API, gpu.gpudra.dev/v1alpha1, and a leaf every
// binary may import (it links no NVML, simulator or client code):
//
//   - every public name: the driver name, the DeviceClasses, device types, attribute and
//     capacity names, extended resources, taints, labels and annotations (names.go);
//   - the opaque configuration kinds GpuConfig and MigConfig that DeviceClasses and
//     ResourceClaims carry: strict decoding, defaults (Normalize), validation with field
//     paths, deep copies, and the merge of class and claim configs in Kubernetes'
//     precedence order;
//   - ReadDevice, the one reader of what a published device says in its attributes and
//     capacities (device.go).
//
// +k8s:deepcopy-gen=package
package v1alpha1

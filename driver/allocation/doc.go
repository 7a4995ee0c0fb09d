// Package allocation runs Kubernetes' real structured DRA allocator
// (k8s.io/dynamic-resource-allocation/structured) in-process over a set of
// ResourceSlices, DeviceClasses and already-allocated claims, the way kube-scheduler
// does for one node. Tests, benchmarks, the placement simulator and `gpudra explain`
// use it to ask "does this claim fit here, and on which devices?".
package allocation

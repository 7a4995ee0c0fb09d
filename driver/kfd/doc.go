// Package kfd discovers AMD Instinct and Hygon DCU GPUs from the kernel's KFD topology
// (/sys/class/kfd/kfd/topology) and the DRM class (/sys/class/drm) in pure Go: every AMD
// SMI binding needs cgo, and sysfs holds all a node publishes. It fills driver.GPU values
// that render into the same vocabulary NVIDIA GPUs publish.
package kfd

// Package kfdsim builds simulated sysfs trees of AMD Instinct and Hygon DCU nodes (the KFD
// topology and the DRM class driver/kfd reads) from YAML profiles, for tests, demos and
// the lab. A simulated tree is a test double, never a fallback for a node's real /sys.
package kfdsim

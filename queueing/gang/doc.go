// Package gang decides whether — and where — a whole gang of pods with DRA claims fits:
// every pod's claims are allocated by Kubernetes' real structured allocator over the live
// ResourceSlices and allocations, pod sets stay inside the network domain (rack, block)
// they require, and nothing is placed unless everything is.
package gang

// Package gang decides whether — and where — a whole gang of pods with DRA claims fits:
// every pod's claims are allocated by Kubernetes' real structured allocator over the live
// ResourceSlices and allocations, pod sets and their slices stay inside the network
// domains (block, rack, ToR, host) they require, or that their switches' oversubscription
// requires, and nothing is placed unless everything is.
package gang

// Package placement is the placement logic gpudra-scheduler uses: the cluster as plain data
// (nodes with CPU, memory and per-GPU free milli-GPU; pods with their GPU demand), the
// GPU models traces name, the typical pods of a workload, the fragmentation measure of the
// FGD paper, and the two policies built on it: FGD and gpudra's own (stranded
// fragmentation with the allocator's first fit). It imports no
// device-model, allocator or client code; the paper's evaluation harness is in
// sim/reproduction.
package placement

// Package placement is gpudra's pure placement logic: the cluster as plain data (nodes
// with CPU, memory and per-GPU free milli-GPU; pods with their GPU demand), the
// node-scoring policies compared in the FGD paper plus kube-scheduler's and gpudra's
// own, and the paper's evaluation protocol (arrival order, inflation, metric) over the
// Alibaba GPU traces. It never talks to the API server; the replay engine that checks
// every placement with the real DRA allocator lives in placement/sim.
package placement

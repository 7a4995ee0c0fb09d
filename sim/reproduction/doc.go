// Package reproduction is the evaluation harness of the FGD paper (Weng et al., USENIX
// ATC '23) over the Alibaba GPU traces: trace loaders, the arrival order and inflation
// of the protocol, the baseline policies (Random, DotProd, GpuClustering, GpuPacking,
// BestFit, kube-scheduler's least-allocated), the scheduler that runs a policy the way
// kube-scheduler would, the fragmentation curve, and the paper's published figures.
// docs/protocol.md describes the protocol.
package reproduction

// Package defrag plans the moves that undo GPU fragmentation: which running pods to evict,
// and where each runs again, so that N whole GPUs, a whole node or a pending gang's room
// come free. It reads the cluster as plain values (ResourceSlices, allocated claims, pods,
// PodDisruptionBudgets), so the same planner runs on a live cluster's lists and in the
// simulator, and it checks every move with Kubernetes' real structured DRA allocator on the
// plan's projected state. It never writes to a cluster.
package defrag

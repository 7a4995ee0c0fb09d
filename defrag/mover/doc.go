// Package mover carries defragmentation plans out in gpudra-controller (feature gate
// Defragmentation, alpha): when a Kueue Workload waits because its gang does not fit, it
// plans room for it (package defrag) and moves the plan's pods, a pod through the Eviction
// API (so PodDisruptionBudgets hold) at a bounded rate, a Kueue Workload's gang by setting
// its gpudra.dev/topology admission check to Retry (Kueue evicts and requeues it whole).
package mover

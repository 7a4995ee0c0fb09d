// Package prewarm warms the caches of the datasets a queued Kueue Workload reads while it
// waits (feature gate DataPrewarm): where Fluid's DataLoad kind is served, one DataLoad per
// Workload and dataset, owned by the Workload and deleted once it is admitted; elsewhere an
// Event on the Workload naming the nodes its pods may run on, for a cache agent to act on.
package prewarm

// Package largefirst admits large GPU jobs first: a mutating webhook gives a new Kueue-queued
// batch Job that has no priority of its own the WorkloadPriorityClass of the band its GPU
// demand falls in, so that Kueue orders it before smaller jobs, and an ageing controller
// lifts every job the policy looked at that has waited longer than a bound to the highest
// band, so that a stream of large jobs cannot keep a small one waiting for ever.
package largefirst

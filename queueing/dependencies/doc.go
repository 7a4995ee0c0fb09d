// Package dependencies runs a Kueue-queued batch Job only after the jobs it names in its
// annotation gpudra.dev/run-after have succeeded, holding no quota while it waits: a
// mutating webhook adds gpudra's gate to Kueue's kueue.x-k8s.io/admission-gated-by when
// the job is created (refusing cycles), and a controller removes it once every
// dependency is complete, or deactivates the job's Workload when one failed.
package dependencies

// Package validate checks, without a cluster, the files users write for gpudra: the
// ResourceClaims, ResourceClaimTemplates and DeviceClasses that carry gpu.gpudra.dev
// configs, MIG layout files (optionally against a simulated node), network topology files
// and lab files. Each kind is checked by the parser and validation its component runs, and
// every problem is reported with its document and field path.
package validate

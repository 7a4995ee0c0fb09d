// Package lab holds the default lab file of `gpudra lab` (deployments/lab/lab.yaml), embedded
// so that the CLI works from any directory.
package lab

import _ "embed"

// DefaultFile is the default lab file: 2 blocks × 2 racks × 2 simulated GPU nodes.
//
//go:embed lab.yaml
var DefaultFile []byte

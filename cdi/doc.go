// Package cdi writes the Container Device Interface specs through which the container
// runtime gives a pod what gpudra prepared: one spec per claim (kind gpudra.dev/gpu),
// one CDI device per allocated device or share, with its device nodes, the environment
// telling the workload what it got, and the edits that enforce a share's limits
// (HAMi-core environment and preload, or MPS). The GPU parts (device nodes, the driver's
// libraries, binaries and hooks) come from nvidia-container-toolkit's nvcdi reading the
// driver root (Driver, driver.go); gpudra's own edits are a pure function of plain data
// (edits.go); Specs writes them to disk.
package cdi

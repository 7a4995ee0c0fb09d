// Package usage finds what the kubelet plugin's prepared claims use of their GPUs: it
// samples the GPUs' compute processes through NVML, attributes each to the claims of its
// pod, and serves the per-claim usage metrics and the usage the core writes into the
// claims' status.devices. It reads the prepared claims through Node and never imports the
// plugin's core.
package usage

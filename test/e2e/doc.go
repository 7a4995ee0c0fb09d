// Package e2e holds gpudra's end-to-end tests: they run the real binaries against a real
// Kubernetes 1.37 control plane on this machine (the lab of lab), brought up once for the
// whole suite and always torn down. GPUDRA_E2E=0 skips them; GPUDRA_E2E_REUSE=1 uses a lab
// that is already running (and leaves it running).
package e2e

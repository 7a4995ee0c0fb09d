// Package e2e holds gpudra's end-to-end tests: they run the real binaries against a real
// Kubernetes 1.37 control plane on this machine (the lab of lab), brought up once for the
// whole suite and always torn down. They build only with the e2e tag (go test -tags e2e;
// make test and make e2e set it), so a plain go test ./... leaves them out.
// GPUDRA_E2E_REUSE=1 uses a lab that is already running (and leaves it running).
package e2e

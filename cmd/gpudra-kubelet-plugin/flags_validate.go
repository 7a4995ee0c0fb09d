package main

import "github.com/gpudra/gpudra/internal/bindaddr"

// validate refuses, before the plugin reaches for the node or the cluster, flag values it
// cannot run with that nothing else checks at start, naming the flag and what it accepts
// (--memory-oversubscription and --mig are checked with the render options).
func (f flags) validate() error {
	if f.metricsAt != "" {
		if err := bindaddr.Validate("--metrics-bind-address", f.metricsAt); err != nil {
			return err
		}
	}
	return nil
}

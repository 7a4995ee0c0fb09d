package lab

import (
	"strings"

	"github.com/gpudra/gpudra/internal/features"
)

// gpudraFeatureGates are the gpudra gates a lab's plugins and controllers run with: every
// one on, alpha ones included, so that the demo and the end-to-end tests reach every
// behaviour (dynamic MIG on the lab's H100 nodes, the tests' HAMi-core, oversubscription and
// share priority on the real node) whatever its stage (docs/feature-gates.md).
func gpudraFeatureGates() map[string]bool {
	gates := map[string]bool{}
	for _, name := range features.Known() {
		gates[name] = true
	}
	return gates
}

// gpudraFeatureGatesFlag is gpudraFeatureGates as the binaries' --feature-gates flag.
func gpudraFeatureGatesFlag() string {
	var pairs []string
	for _, name := range features.Known() {
		pairs = append(pairs, name+"=true")
	}
	return "--" + features.FlagName + "=" + strings.Join(pairs, ",")
}

// Package features declares gpudra's feature gates: the behaviours that are not yet
// generally available, each with its maturity (alpha: off by default, beta: on by default)
// and the gpudra release that gave it that stage, registered on a
// k8s.io/component-base/featuregate gate that every gpudra binary exposes as
// --feature-gates. The binaries decide what a gate that is off means for their flags.
package features

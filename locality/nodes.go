package locality

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// Caches says whether a node with these labels caches n's dataset: it carries one of
// n's keys, with any value but "false".
func Caches(labels map[string]string, n Need) bool {
	for _, k := range n.Keys {
		if v, ok := labels[k]; ok && v != "false" {
			return true
		}
	}
	return false
}

// Cached is how many of needs a node with these labels caches.
func Cached(labels map[string]string, needs []Need) int {
	c := 0
	for _, n := range needs {
		if Caches(labels, n) {
			c++
		}
	}
	return c
}

// Score is 0 to max: the share of needs a node with these labels caches.
func Score(labels map[string]string, needs []Need, max int64) int64 {
	if len(needs) == 0 {
		return 0
	}
	return max * int64(Cached(labels, needs)) / int64(len(needs))
}

// WithoutPreferred drops the needs the pod's own preferred node affinity already favours
// (a term whose expressions name one of a need's keys, as Fluid's webhook adds with weight
// 100 for the nodes caching the pod's datasets): kube-scheduler's NodeAffinity plugin
// scores those, and counting them again would weigh a dataset twice.
func WithoutPreferred(spec *corev1.PodSpec, needs []Need) []Need {
	if spec == nil || spec.Affinity == nil || spec.Affinity.NodeAffinity == nil {
		return needs
	}
	named := map[string]bool{}
	for _, t := range spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
		for _, e := range t.Preference.MatchExpressions {
			named[e.Key] = true
		}
		for _, e := range t.Preference.MatchFields {
			named[e.Key] = true
		}
	}
	if len(named) == 0 {
		return needs
	}
	return slices.DeleteFunc(slices.Clone(needs), func(n Need) bool {
		return slices.ContainsFunc(n.Keys, func(k string) bool { return named[k] })
	})
}

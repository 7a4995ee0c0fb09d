package helm_test

import (
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// TestDefragmentationFollowsItsGate: off (alpha, the default), the controller gets no
// defragmentation flag and may not evict; on, its flags from the values and RBAC to read
// PodDisruptionBudgets and create evictions, nothing more (no pod deletes).
func TestDefragmentationFollowsItsGate(t *testing.T) {
	off := render(t)
	if slices.ContainsFunc(controllerArgs(t, off), func(a string) bool { return strings.HasPrefix(a, "--defrag-") }) {
		t.Error("Defragmentation off: the controller gets its flags")
	}
	if v := verbsByResource(off.get("ClusterRole", "gpudra-controller").(*rbacv1.ClusterRole)); v["/pods/eviction"] != nil || v["policy/poddisruptionbudgets"] != nil {
		t.Errorf("Defragmentation off: the controller may evict (%v) or read budgets (%v)", v["/pods/eviction"], v["policy/poddisruptionbudgets"])
	}
	on := render(t, "featureGates.Defragmentation=true", "defrag.evictionsPerMinute=3")
	args := controllerArgs(t, on)
	for _, want := range []string{"--feature-gates=Defragmentation=true", "--defrag-interval=1m", "--defrag-evictions-per-minute=3", "--defrag-max-evictions=16"} {
		if !slices.Contains(args, want) {
			t.Errorf("controller args %v lack %s", args, want)
		}
	}
	checkClusterRoleVerbs(t, on, "gpudra-controller", map[string][]string{
		"/pods/eviction":              {"create"},
		"policy/poddisruptionbudgets": {"list", "watch"},
		"/pods":                       {"list", "update", "watch"},
		"/nodes":                      {"list", "patch", "watch"},
	})
}

func TestDefragmentationRefusesValuesThatCannotWork(t *testing.T) {
	for _, tc := range []struct {
		sets []string
		want string
	}{
		{[]string{"featureGates.Defragmentation=true", "defrag.maxEvictions=0"}, "defrag.maxEvictions=0: want a whole number of at least 1"},
		{[]string{"featureGates.Defragmentation=true", "defrag.evictionsPerMinute=1.5"}, "defrag.evictionsPerMinute=1.5: want a whole number of at least 1"},
		{[]string{"featureGates.Defragmentation=true", "featureGates.TopologyAdmissionCheck=false"}, "featureGates.Defragmentation needs featureGates.TopologyAdmissionCheck on"},
	} {
		if out, err := template(t, tc.sets); err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("%v: err %v, output should say %q:\n%s", tc.sets, err, tc.want, out)
		}
	}
}

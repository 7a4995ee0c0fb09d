package helm_test

import (
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// TestPrewarmFollowsItsGate: off (alpha, the default), the controller gets no prewarm flag
// and may not touch DataLoads; on, its bound from the values and get, list, create and
// delete of DataLoads, nothing more.
func TestPrewarmFollowsItsGate(t *testing.T) {
	off := render(t)
	if slices.ContainsFunc(controllerArgs(t, off), func(a string) bool { return strings.HasPrefix(a, "--prewarm-") }) {
		t.Error("DataPrewarm off: the controller gets its flags")
	}
	if v := verbsByResource(off.get("ClusterRole", "gpudra-controller").(*rbacv1.ClusterRole)); v["data.fluid.io/dataloads"] != nil {
		t.Errorf("DataPrewarm off: the controller may %v DataLoads", v["data.fluid.io/dataloads"])
	}
	on := render(t, "featureGates.DataPrewarm=true", "prewarm.maxDataLoads=5")
	args := controllerArgs(t, on)
	for _, want := range []string{"--feature-gates=DataPrewarm=true", "--prewarm-max-dataloads=5"} {
		if !slices.Contains(args, want) {
			t.Errorf("controller args %v lack %s", args, want)
		}
	}
	checkClusterRoleVerbs(t, on, "gpudra-controller", map[string][]string{
		"data.fluid.io/dataloads": {"create", "delete", "get", "list"},
		"/persistentvolumeclaims": {"list", "watch"},
		"/persistentvolumes":      {"list", "watch"},
	})
	if out, err := template(t, []string{"featureGates.DataPrewarm=true", "prewarm.maxDataLoads=0"}); err == nil ||
		!strings.Contains(out, "prewarm.maxDataLoads=0: want a whole number of at least 1") {
		t.Errorf("maxDataLoads=0: err %v, output should name prewarm.maxDataLoads:\n%s", err, out)
	}
}

package helm_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// TestPrewarmFollowsItsGate: off (alpha, the default), the controller gets no prewarm flag
// and may not touch DataLoads; on, its bound from the values and, in a ClusterRole of its
// own, get, list, create and delete of DataLoads, nothing more.
func TestPrewarmFollowsItsGate(t *testing.T) {
	off := render(t)
	if slices.ContainsFunc(controllerArgs(t, off), func(a string) bool { return strings.HasPrefix(a, "--prewarm-") }) {
		t.Error("DataPrewarm off: the controller gets its flags")
	}
	if v := verbsByResource(off.get("ClusterRole", "gpudra-controller").(*rbacv1.ClusterRole)); v["data.fluid.io/dataloads"] != nil {
		t.Errorf("DataPrewarm off: the controller may %v DataLoads", v["data.fluid.io/dataloads"])
	}
	if off.get("ClusterRole", "gpudra-controller-data-prewarm") != nil {
		t.Error("DataPrewarm off: ClusterRole gpudra-controller-data-prewarm is rendered")
	}
	on := render(t, "featureGates.DataPrewarm=true", "prewarm.maxDataLoads=5")
	args := controllerArgs(t, on)
	for _, want := range []string{"--feature-gates=DataPrewarm=true", "--prewarm-max-dataloads=5"} {
		if !slices.Contains(args, want) {
			t.Errorf("controller args %v lack %s", args, want)
		}
	}
	if got := verbsByResource(on.get("ClusterRole", "gpudra-controller-data-prewarm").(*rbacv1.ClusterRole)); !reflect.DeepEqual(got, map[string][]string{
		"data.fluid.io/dataloads": {"create", "delete", "get", "list"},
	}) {
		t.Errorf("DataPrewarm on: ClusterRole gpudra-controller-data-prewarm grants %v", got)
	}
	b := on.get("ClusterRoleBinding", "gpudra-controller-data-prewarm").(*rbacv1.ClusterRoleBinding)
	if b.RoleRef.Name != "gpudra-controller-data-prewarm" || len(b.Subjects) != 1 || b.Subjects[0].Name != "gpudra-controller" {
		t.Errorf("DataPrewarm on: binding %+v", b)
	}
	if out, err := template(t, []string{"featureGates.DataPrewarm=true", "prewarm.maxDataLoads=0"}); err == nil ||
		!strings.Contains(out, "prewarm.maxDataLoads=0: want a whole number of at least 1") {
		t.Errorf("maxDataLoads=0: err %v, output should name prewarm.maxDataLoads:\n%s", err, out)
	}
}

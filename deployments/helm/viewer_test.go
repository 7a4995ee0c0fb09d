//go:build e2e

package helm_test

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/diff"
)

// TestViewerRole proves the role for `gpudra explain` reads exactly what explain reads, writes
// nothing, and is left out with rbac.create=false.
func TestViewerRole(t *testing.T) {
	read := []string{"get", "list", "watch"}
	want := map[string][]string{
		"resource.k8s.io/resourceslices":         read,
		"resource.k8s.io/resourceclaims":         read,
		"resource.k8s.io/resourceclaimtemplates": read,
		"resource.k8s.io/deviceclasses":          read,
		"/pods":                                  read,
		"/nodes":                                 read,
		"kueue.x-k8s.io/workloads":               read,
		"kueue.x-k8s.io/clusterqueues":           read,
		"kueue.x-k8s.io/localqueues":             read,
		"kueue.x-k8s.io/admissionchecks":         read,
		"kueue.x-k8s.io/resourceflavors":         read,
	}
	role, ok := render(t).get("ClusterRole", "gpudra-viewer").(*rbacv1.ClusterRole)
	if !ok {
		t.Fatal("no ClusterRole gpudra-viewer")
	}
	if got := verbsByResource(role); !apiequality.Semantic.DeepEqual(got, want) {
		t.Errorf("viewer permissions:\n%s", diff.Diff(want, got))
	}
	if render(t, "rbac.create=false").get("ClusterRole", "gpudra-viewer") != nil {
		t.Error("rbac.create=false still renders the viewer role")
	}
}

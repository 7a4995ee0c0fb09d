package helm_test

import (
	"slices"
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
		"/persistentvolumeclaims":                read,
		"/persistentvolumes":                     read,
		"kueue.x-k8s.io/workloads":               read,
		"kueue.x-k8s.io/clusterqueues":           read,
		"kueue.x-k8s.io/localqueues":             read,
		"kueue.x-k8s.io/cohorts":                 read,
		"kueue.x-k8s.io/admissionchecks":         read,
		"kueue.x-k8s.io/resourceflavors":         read,
		"batch/jobs":                             read,
		"jobset.x-k8s.io/jobsets":                {"get"},
	}
	role, ok := render(t).get("ClusterRole", "gpudra-viewer").(*rbacv1.ClusterRole)
	if !ok {
		t.Fatal("no ClusterRole gpudra-viewer")
	}
	if got := verbsByResource(role); !apiequality.Semantic.DeepEqual(got, want) {
		t.Errorf("viewer permissions:\n%s", diff.Diff(want, got))
	}
	var urls []string
	for _, r := range role.Rules {
		if len(r.NonResourceURLs) > 0 {
			if len(r.Verbs) != 1 || r.Verbs[0] != "get" {
				t.Errorf("non-resource URLs %v with verbs %v, want get only", r.NonResourceURLs, r.Verbs)
			}
			urls = append(urls, r.NonResourceURLs...)
		}
	}
	if !slices.Equal(urls, []string{"/dashboard", "/dashboard/*"}) {
		t.Errorf("non-resource URLs %v, want the web view's /dashboard and /dashboard/*", urls)
	}
	if render(t, "rbac.create=false").get("ClusterRole", "gpudra-viewer") != nil {
		t.Error("rbac.create=false still renders the viewer role")
	}
}

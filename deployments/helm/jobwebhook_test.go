package helm_test

import (
	"slices"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// jobWebhook is the one webhook of MutatingWebhookConfiguration name in m, checked to see
// the creation of batch Jobs only and to call the controller's Service at path.
func jobWebhook(t *testing.T, m manifest, name, path string) admissionv1.MutatingWebhook {
	t.Helper()
	mwc, ok := m.get("MutatingWebhookConfiguration", name).(*admissionv1.MutatingWebhookConfiguration)
	if !ok || len(mwc.Webhooks) != 1 {
		t.Fatalf("no MutatingWebhookConfiguration %s with one webhook", name)
	}
	w := mwc.Webhooks[0]
	if len(w.Rules) != 1 || !slices.Equal(w.Rules[0].Operations, []admissionv1.OperationType{admissionv1.Create}) ||
		!slices.Equal(w.Rules[0].Resources, []string{"jobs"}) || !slices.Equal(w.Rules[0].APIGroups, []string{"batch"}) {
		t.Errorf("%s: rules %+v, want CREATE of batch jobs only", name, w.Rules)
	}
	if s := w.ClientConfig.Service; s == nil || s.Path == nil || *s.Path != path {
		t.Errorf("%s: clientConfig %+v, want the controller's Service at %s", name, w.ClientConfig, path)
	}
	return w
}

// checkClusterRoleVerbs checks that ClusterRole name in m grants, on each resource
// (group/resource) of want, exactly its verbs.
func checkClusterRoleVerbs(t *testing.T, m manifest, name string, want map[string][]string) {
	t.Helper()
	role, ok := m.get("ClusterRole", name).(*rbacv1.ClusterRole)
	if !ok {
		t.Fatalf("no ClusterRole %s", name)
	}
	verbs := verbsByResource(role)
	for res, w := range want {
		if !slices.Equal(verbs[res], w) {
			t.Errorf("%s: %s verbs %v, want %v", name, res, verbs[res], w)
		}
	}
}

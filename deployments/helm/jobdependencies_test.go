package helm_test

import (
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestJobDependenciesFollowTheirGate: with JobDependencies off (alpha, the default) the chart
// installs no mutating webhook and grants nothing on Jobs; on, new Jobs with
// gpudra.dev/run-after, and only those, go to the controller's webhook, which a Job cannot
// skip (failurePolicy Fail), and the controller may patch Jobs and Workloads.
func TestJobDependenciesFollowTheirGate(t *testing.T) {
	off := render(t)
	if off.get("MutatingWebhookConfiguration", "gpudra-job-dependencies") != nil || off.get("ClusterRole", "gpudra-controller-job-dependencies") != nil {
		t.Error("JobDependencies off: the chart installs its webhook or RBAC")
	}
	for _, sets := range [][]string{{"featureGates.JobDependencies=true"}, {"featureGates.AllAlpha=true", "controller.dashboardPort=0"}} {
		on := render(t, sets...)
		mwc, ok := on.get("MutatingWebhookConfiguration", "gpudra-job-dependencies").(*admissionv1.MutatingWebhookConfiguration)
		if !ok || len(mwc.Webhooks) != 1 {
			t.Fatalf("%v: no MutatingWebhookConfiguration gpudra-job-dependencies with one webhook", sets)
		}
		w := mwc.Webhooks[0]
		if w.FailurePolicy == nil || *w.FailurePolicy != admissionv1.Fail {
			t.Errorf("failurePolicy %v, want Fail: an ungated Job would run before its dependencies", w.FailurePolicy)
		}
		if len(w.Rules) != 1 || !slices.Equal(w.Rules[0].Operations, []admissionv1.OperationType{admissionv1.Create}) || !slices.Equal(w.Rules[0].Resources, []string{"jobs"}) || !slices.Equal(w.Rules[0].APIGroups, []string{"batch"}) {
			t.Errorf("rules %+v, want CREATE of batch jobs only", w.Rules)
		}
		if len(w.MatchConditions) != 1 || !strings.Contains(w.MatchConditions[0].Expression, "'gpudra.dev/run-after' in object.metadata.annotations") {
			t.Errorf("matchConditions %+v, want only Jobs with gpudra.dev/run-after", w.MatchConditions)
		}
		if s := w.ClientConfig.Service; s == nil || s.Path == nil || *s.Path != "/mutate-gpudra-job-dependencies" {
			t.Errorf("clientConfig %+v, want the controller's Service at /mutate-gpudra-job-dependencies", w.ClientConfig)
		}
		role, ok := on.get("ClusterRole", "gpudra-controller-job-dependencies").(*rbacv1.ClusterRole)
		if !ok {
			t.Fatal("no ClusterRole gpudra-controller-job-dependencies")
		}
		verbs := verbsByResource(role)
		for res, want := range map[string][]string{"batch/jobs": {"list", "patch", "watch"}, "kueue.x-k8s.io/workloads": {"patch"}, "jobset.x-k8s.io/jobsets": {"get"}} {
			if !slices.Equal(verbs[res], want) {
				t.Errorf("%s: verbs %v, want %v", res, verbs[res], want)
			}
		}
	}
	url := render(t, "featureGates.JobDependencies=true", "webhook.url=https://10.0.0.1:9443/validate-gpudra-config")
	w := url.get("MutatingWebhookConfiguration", "gpudra-job-dependencies").(*admissionv1.MutatingWebhookConfiguration).Webhooks[0]
	if w.ClientConfig.URL == nil || *w.ClientConfig.URL != "https://10.0.0.1:9443/mutate-gpudra-job-dependencies" {
		t.Errorf("webhook.url set: clientConfig %+v, want the job dependencies' path beside the config validation's", w.ClientConfig)
	}
}

func TestJobDependenciesRefuseValuesThatCannotWork(t *testing.T) {
	for _, tc := range []struct {
		sets []string
		want string
	}{
		{[]string{"featureGates.JobDependencies=true", "webhook.enabled=false"}, "featureGates.JobDependencies needs webhook.enabled=true"},
		{[]string{"featureGates.JobDependencies=true", "webhook.url=https://10.0.0.1:9443/hooks"}, "webhook.url=https://10.0.0.1:9443/hooks: with featureGates.JobDependencies, want a URL ending in /validate-gpudra-config"},
	} {
		out, err := template(t, tc.sets)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("%v: err %v, output should say %q:\n%.300s", tc.sets, err, tc.want, out)
		}
	}
}

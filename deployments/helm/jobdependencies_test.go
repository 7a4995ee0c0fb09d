package helm_test

import (
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/utils/ptr"
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
		t.Run(strings.Join(sets, ","), func(t *testing.T) {
			on := render(t, sets...)
			w := jobWebhook(t, on, "gpudra-job-dependencies", "/mutate-gpudra-job-dependencies")
			if w.FailurePolicy == nil || *w.FailurePolicy != admissionv1.Fail {
				t.Errorf("failurePolicy %v, want Fail: an ungated Job would run before its dependencies", w.FailurePolicy)
			}
			if len(w.MatchConditions) != 1 || !strings.Contains(w.MatchConditions[0].Expression, "'gpudra.dev/run-after' in object.metadata.annotations") {
				t.Errorf("matchConditions %+v, want only Jobs with gpudra.dev/run-after", w.MatchConditions)
			}
			checkClusterRoleVerbs(t, on, "gpudra-controller-job-dependencies",
				map[string][]string{"batch/jobs": {"list", "patch", "watch"}, "kueue.x-k8s.io/workloads": {"patch"}, "jobset.x-k8s.io/jobsets": {"get"}})
		})
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

// TestControllerUpdatesOfJobsAreHeldToTheGate: the policy lets gpudra-controller remove its
// own admission gate from a waiting Job and nothing else, and leaves other users alone.
func TestControllerUpdatesOfJobsAreHeldToTheGate(t *testing.T) {
	policy, ok := render(t, "featureGates.JobDependencies=true").get("ValidatingAdmissionPolicy", "gpudra-controller-job-dependencies").(*admissionv1.ValidatingAdmissionPolicy)
	if !ok {
		t.Fatal("no ValidatingAdmissionPolicy gpudra-controller-job-dependencies")
	}
	if errs := compileErrors(t, policy); len(errs) > 0 {
		t.Fatalf("the API server would refuse the policy: %v", errs)
	}
	waiting := func(gates string) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "train",
			Labels:      map[string]string{"kueue.x-k8s.io/queue-name": "training"},
			Annotations: map[string]string{"gpudra.dev/run-after": "preprocess", "kueue.x-k8s.io/admission-gated-by": gates}},
			Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](1), Suspend: ptr.To(true)}}
	}
	released := func(gates string) *batchv1.Job {
		j := waiting(gates)
		if gates == "" {
			delete(j.Annotations, "kueue.x-k8s.io/admission-gated-by")
		}
		return j
	}
	for _, tc := range []struct {
		name      string
		old, obj  *batchv1.Job
		user      string
		want      bool
		wantWords string
	}{
		{name: "the gate removed, and the annotation with it", old: waiting("gpudra.dev/run-after"), obj: released(""), user: controllerUser, want: true},
		{name: "the gate removed, another kept", old: waiting("example.com/check, gpudra.dev/run-after"), obj: released("example.com/check"), user: controllerUser, want: true},
		{name: "another gate removed", old: waiting("example.com/check,gpudra.dev/run-after"), obj: released("gpudra.dev/run-after"), user: controllerUser, wantWords: "and no other gate"},
		{name: "a job not at the gate", old: waiting("example.com/check"), obj: released(""), user: controllerUser, wantWords: "only Jobs that wait at its admission gate"},
		{name: "another annotation changed", old: waiting("gpudra.dev/run-after"), obj: func() *batchv1.Job {
			j := released("")
			j.Annotations["gpudra.dev/run-after"] = "other"
			return j
		}(), user: controllerUser, wantWords: "no annotation of a Job but"},
		{name: "the spec changed", old: waiting("gpudra.dev/run-after"), obj: func() *batchv1.Job {
			j := released("")
			j.Spec.Parallelism = ptr.To[int32](8)
			return j
		}(), user: controllerUser, wantWords: "does not change a Job's spec"},
		{name: "another user is not held", old: waiting("gpudra.dev/run-after"), obj: func() *batchv1.Job {
			j := released("")
			j.Spec.Parallelism = ptr.To[int32](8)
			return j
		}(), user: "alice", want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, msg := review(t, policy, request{op: admission.Update, obj: tc.obj, old: tc.old, username: tc.user,
				gvk: schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"},
				gvr: schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}})
			if ok != tc.want || !strings.Contains(msg, tc.wantWords) {
				t.Errorf("admitted %v (%q), want %v saying %q", ok, msg, tc.want, tc.wantWords)
			}
		})
	}
}

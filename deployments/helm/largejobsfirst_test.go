package helm_test

import (
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// controllerArgs are the controller container's arguments.
func controllerArgs(t *testing.T, m manifest) []string {
	t.Helper()
	d, ok := m.get("Deployment", "gpudra-controller").(*appsv1.Deployment)
	if !ok {
		t.Fatal("no Deployment gpudra-controller")
	}
	return d.Spec.Template.Spec.Containers[0].Args
}

// TestLargeJobsFirstFollowsItsGate: off (alpha, the default), the chart installs nothing of
// it; on, the bands' WorkloadPriorityClasses with their values, the controller's flags, a
// webhook that only queued Jobs without a priority of their own reach and that a Job is
// created without when the controller is down (failurePolicy Ignore), and RBAC on Jobs.
func TestLargeJobsFirstFollowsItsGate(t *testing.T) {
	off := render(t)
	if off.get("MutatingWebhookConfiguration", "gpudra-large-jobs-first") != nil || off.get("WorkloadPriorityClass", "gpudra-large") != nil ||
		slices.ContainsFunc(controllerArgs(t, off), func(a string) bool { return strings.HasPrefix(a, "--large-jobs-first") }) {
		t.Error("LargeJobsFirst off: the chart installs its webhook, classes or flags")
	}
	on := render(t, "featureGates.LargeJobsFirst=true")
	for name, value := range map[string]int32{"gpudra-large": 10, "gpudra-huge": 20} {
		wpc, ok := on.get("WorkloadPriorityClass", name).(*kueue.WorkloadPriorityClass)
		if !ok || wpc.Value != value {
			t.Errorf("WorkloadPriorityClass %s: %+v, want value %d", name, wpc, value)
		}
	}
	args := controllerArgs(t, on)
	for _, want := range []string{"--large-jobs-first-bands=16:gpudra-large,64:gpudra-huge", "--large-jobs-first-max-wait=1h"} {
		if !slices.Contains(args, want) {
			t.Errorf("controller args %v lack %s", args, want)
		}
	}
	w := jobWebhook(t, on, "gpudra-large-jobs-first", "/mutate-gpudra-large-jobs-first")
	if w.FailurePolicy == nil || *w.FailurePolicy != admissionv1.Ignore {
		t.Errorf("failurePolicy %v, want Ignore: the policy orders jobs and guards nothing", w.FailurePolicy)
	}
	sel := metav1.FormatLabelSelector(w.ObjectSelector)
	if sel != "!kueue.x-k8s.io/priority-class,kueue.x-k8s.io/queue-name" {
		t.Errorf("objectSelector %s, want queued Jobs without a priority class", sel)
	}
	checkClusterRoleVerbs(t, on, "gpudra-controller-large-jobs-first",
		map[string][]string{"batch/jobs": {"list", "patch", "watch"}, "resource.k8s.io/resourceclaimtemplates": {"get"}})
}

func TestLargeJobsFirstRefusesBandsThatCannotWork(t *testing.T) {
	on := "featureGates.LargeJobsFirst=true"
	for _, tc := range []struct {
		sets []string
		want string
	}{
		{[]string{on, "webhook.enabled=false"}, "featureGates.LargeJobsFirst needs webhook.enabled=true"},
		{[]string{on, "queueing.largeJobsFirst.bands=[]"}, "queueing.largeJobsFirst.bands is empty"},
		{[]string{on, `queueing.largeJobsFirst.bands=[{"minGPUs":64,"priorityClass":"huge","value":20},{"minGPUs":16,"priorityClass":"large","value":30}]`},
			"queueing.largeJobsFirst.bands[1].minGPUs=16: want bands by ascending minGPUs, above the band before's 64"},
		{[]string{on, `queueing.largeJobsFirst.bands=[{"minGPUs":0,"priorityClass":"large","value":10}]`}, "bands[0].minGPUs=0: want a whole number of at least 1"},
		{[]string{on, `queueing.largeJobsFirst.bands=[{"minGPUs":16,"priorityClass":"Large_Jobs","value":10}]`}, `bands[0].priorityClass="Large_Jobs": want a WorkloadPriorityClass name`},
		{[]string{on, `queueing.largeJobsFirst.bands=[{"minGPUs":16,"priorityClass":"large","value":10},{"minGPUs":64,"priorityClass":"huge","value":5}]`},
			"bands[1].value=5: want a whole number above 0 and above the band before's value (10)"},
		{[]string{on, `queueing.largeJobsFirst.bands=[{"minGPUs":16,"priorityClass":"large","value":10,"gpus":4}]`}, "bands[0].gpus: not a band field"},
		{[]string{on, "kueue.samples=true", `queueing.largeJobsFirst.bands=[{"minGPUs":16,"priorityClass":"large","value":500}]`},
			"bands[0].value=500: want it below every kueue.priorities value (100)"},
		{[]string{on, "queueing.largeJobsFirst.maxWait=soon"}, "queueing.largeJobsFirst.maxWait=soon: want a duration"},
	} {
		out, err := template(t, tc.sets)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("%v: err %v, output should say %q:\n%.300s", tc.sets, err, tc.want, out)
		}
	}
}

// TestControllerLiftsOnlyWaitingJobsToTheTopBand: the policies let gpudra-controller set a
// waiting job's priority class to the top band and nothing else, and still let it release
// a job dependency's gate.
func TestControllerLiftsOnlyWaitingJobsToTheTopBand(t *testing.T) {
	m := render(t, "featureGates.LargeJobsFirst=true", "featureGates.JobDependencies=true")
	lift, ok := m.get("ValidatingAdmissionPolicy", "gpudra-controller-large-jobs-first").(*admissionv1.ValidatingAdmissionPolicy)
	if !ok {
		t.Fatal("no ValidatingAdmissionPolicy gpudra-controller-large-jobs-first")
	}
	deps := m.get("ValidatingAdmissionPolicy", "gpudra-controller-job-dependencies").(*admissionv1.ValidatingAdmissionPolicy)
	for _, p := range []*admissionv1.ValidatingAdmissionPolicy{lift, deps} {
		if errs := compileErrors(t, p); len(errs) > 0 {
			t.Fatalf("the API server would refuse %s: %v", p.Name, errs)
		}
	}
	waiting := func(class string) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "small",
			Labels:      map[string]string{"kueue.x-k8s.io/queue-name": "training"},
			Annotations: map[string]string{"gpudra.dev/gpu-demand": "1"}},
			Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](1), Suspend: ptr.To(true)}}
		if class != "" {
			j.Labels["kueue.x-k8s.io/priority-class"] = class
		}
		return j
	}
	with := func(j *batchv1.Job, f func(*batchv1.Job)) *batchv1.Job { f(j); return j }
	for _, tc := range []struct {
		name      string
		old, obj  *batchv1.Job
		user      string
		wantWords string // "" for admitted
	}{
		{name: "a small job lifted to the top band", old: waiting(""), obj: waiting("gpudra-huge"), user: controllerUser},
		{name: "a lower band lifted to the top band", old: waiting("gpudra-large"), obj: waiting("gpudra-huge"), user: controllerUser},
		{name: "lifted to a lower band", old: waiting(""), obj: waiting("gpudra-large"), user: controllerUser, wantWords: "to the top band's class gpudra-huge"},
		{name: "a class the user set", old: waiting("team-urgent"), obj: waiting("gpudra-huge"), user: controllerUser, wantWords: "is not one"},
		{name: "a running job", old: with(waiting(""), func(j *batchv1.Job) { j.Spec.Suspend = ptr.To(false) }),
			obj: with(waiting("gpudra-huge"), func(j *batchv1.Job) { j.Spec.Suspend = ptr.To(false) }), user: controllerUser, wantWords: "is not one"},
		{name: "a job the webhook did not look at", old: with(waiting(""), func(j *batchv1.Job) { j.Annotations = nil }),
			obj: with(waiting("gpudra-huge"), func(j *batchv1.Job) { j.Annotations = nil }), user: controllerUser, wantWords: "is not one"},
		{name: "another label changed too", old: waiting(""), obj: with(waiting("gpudra-huge"), func(j *batchv1.Job) { j.Labels["kueue.x-k8s.io/queue-name"] = "other" }),
			user: controllerUser, wantWords: "changes no label of a Job but"},
		{name: "the spec changed too", old: waiting(""), obj: with(waiting("gpudra-huge"), func(j *batchv1.Job) { j.Spec.Parallelism = ptr.To[int32](8) }),
			user: controllerUser, wantWords: "does not change a Job's spec"},
		{name: "a dependency's gate still released", old: with(waiting(""), func(j *batchv1.Job) {
			j.Annotations["gpudra.dev/run-after"] = "prep"
			j.Annotations["kueue.x-k8s.io/admission-gated-by"] = "gpudra.dev/run-after"
		}), obj: with(waiting(""), func(j *batchv1.Job) { j.Annotations["gpudra.dev/run-after"] = "prep" }), user: controllerUser},
		{name: "another user is not held", old: waiting(""), obj: waiting("gpudra-large"), user: "alice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := request{op: admission.Update, obj: tc.obj, old: tc.old, username: tc.user,
				gvk: schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"},
				gvr: schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}}
			okLift, msgLift := review(t, lift, r)
			okDeps, msgDeps := review(t, deps, r)
			ok, msg := okLift && okDeps, msgLift+msgDeps
			if ok != (tc.wantWords == "") || !strings.Contains(msg, tc.wantWords) {
				t.Errorf("admitted %v (%q), want %v saying %q", ok, msg, tc.wantWords == "", tc.wantWords)
			}
		})
	}
}

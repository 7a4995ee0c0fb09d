package dependencies

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

const ns = "team-a"

// queued is a Job in ns, queued by Kueue, with annotations given as key, value pairs.
func queued(name string, annotations ...string) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name),
		Labels: map[string]string{QueueNameLabel: "gpus"}, Annotations: map[string]string{}}}
	for k := 0; k+1 < len(annotations); k += 2 {
		j.Annotations[annotations[k]] = annotations[k+1]
	}
	return j
}

func newClient(t *testing.T, objs ...client.Object) client.WithWatch {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{batchv1.AddToScheme, kueue.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithIndex(&batchv1.Job{}, RunAfterIndex, RunAfterKeys).Build()
}

// admit sends job to the webhook as a CREATE and returns the response and the job as the
// API server would store it.
func admit(t *testing.T, w Webhook, job *batchv1.Job) (admission.Response, *batchv1.Job) {
	t.Helper()
	raw, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	resp := w.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Namespace: job.Namespace, Name: job.Name, Object: runtime.RawExtension{Raw: raw}}})
	// The jobs here all have annotations, so the gate is one add or replace of its key.
	out := job.DeepCopy()
	for _, p := range resp.Patches {
		if p.Path == "/metadata/annotations/kueue.x-k8s.io~1admission-gated-by" {
			out.Annotations[AdmissionGatedBy], _ = p.Value.(string)
		}
	}
	return resp, out
}

func TestWebhookGatesJobsThatRunAfterOthers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		existing []client.Object
		job      *batchv1.Job
		want     string // admission-gated-by after the webhook; "" for untouched
	}{
		{name: "a job without run-after is left alone", job: queued("solo")},
		{name: "the gate is added", job: queued("train", RunAfterAnnotation, "preprocess"), want: Gate},
		{name: "other gates are kept, gpudra's appended", job: queued("train", RunAfterAnnotation, "preprocess", AdmissionGatedBy, "example.com/quota-check"),
			want: "example.com/quota-check," + Gate},
		{name: "a dependency not created yet is waited for", job: queued("evaluate", RunAfterAnnotation, "train,jobset/sweep"), want: Gate},
		{name: "a JobSet of the same name is no cycle", job: queued("sweep", RunAfterAnnotation, "jobset/sweep"), want: Gate},
		{name: "a chain without a cycle is admitted",
			existing: []client.Object{queued("train", RunAfterAnnotation, "preprocess"), queued("preprocess")},
			job:      queued("evaluate", RunAfterAnnotation, "train", FailurePolicyAnnotation, "run"), want: Gate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, got := admit(t, Webhook{Jobs: newClient(t, tc.existing...)}, tc.job)
			if !resp.Allowed {
				t.Fatalf("denied: %s", resp.Result.Message)
			}
			if g := got.Annotations[AdmissionGatedBy]; g != tc.want {
				t.Errorf("%s = %q, want %q", AdmissionGatedBy, g, tc.want)
			}
		})
	}
}

func TestWebhookRefuses(t *testing.T) {
	chain := []client.Object{
		queued("step-b", RunAfterAnnotation, "step-a"),
		queued("step-c", RunAfterAnnotation, "step-b"),
	}
	for _, tc := range []struct {
		name     string
		existing []client.Object
		job      *batchv1.Job
		want     []string
	}{
		{name: "a job that runs after itself", job: queued("step-a", RunAfterAnnotation, "step-a"),
			want: []string{"step-a → step-a"}},
		{name: "a cycle through existing jobs, with its path", existing: chain, job: queued("step-a", RunAfterAnnotation, "step-c"),
			want: []string{"step-a → step-c → step-b → step-a"}},
		{name: "an empty entry", job: queued("x", RunAfterAnnotation, "a,,b"),
			want: []string{RunAfterAnnotation, "empty entry", "job/<name> or jobset/<name>"}},
		{name: "an unknown kind", job: queued("x", RunAfterAnnotation, "pod/a"),
			want: []string{RunAfterAnnotation, `kind "pod"`, "accepted kinds are job and jobset"}},
		{name: "a name that is no object name", job: queued("x", RunAfterAnnotation, "Step_1"),
			want: []string{RunAfterAnnotation, `"Step_1" is not an object name`}},
		{name: "a name given twice, with and without its kind", job: queued("x", RunAfterAnnotation, "a,job/a"),
			want: []string{RunAfterAnnotation, `"a" is named twice`}},
		{name: "a bad failure policy", job: queued("x", RunAfterAnnotation, "a", FailurePolicyAnnotation, "retry"),
			want: []string{FailurePolicyAnnotation, `"retry"`, "accepted values are fail (the default) and run"}},
		{name: "a job Kueue does not queue", job: func() *batchv1.Job { j := queued("x", RunAfterAnnotation, "a"); j.Labels = nil; return j }(),
			want: []string{RunAfterAnnotation, QueueNameLabel}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, _ := admit(t, Webhook{Jobs: newClient(t, tc.existing...)}, tc.job)
			if resp.Allowed {
				t.Fatal("admitted")
			}
			for _, w := range tc.want {
				if !strings.Contains(resp.Result.Message, w) {
					t.Errorf("message %q does not say %q", resp.Result.Message, w)
				}
			}
		})
	}
}

package largefirst

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

var bands = Bands{{MinGPUs: 16, PriorityClass: "gpudra-large"}, {MinGPUs: 64, PriorityClass: "gpudra-huge"}}

// admit sends j to the webhook as op and returns the response and the job's labels and
// annotations after its patches.
func admit(t *testing.T, w Webhook, op admissionv1.Operation, j *batchv1.Job) (resp admission.Response, labels, annotations map[string]string) {
	t.Helper()
	raw, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	resp = w.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: op, Namespace: j.Namespace, Name: j.Name, Object: runtime.RawExtension{Raw: raw}}})
	patched := raw
	if len(resp.Patches) > 0 {
		patched = apply(t, raw, resp)
	}
	var out batchv1.Job
	if err := json.Unmarshal(patched, &out); err != nil {
		t.Fatal(err)
	}
	return resp, out.Labels, out.Annotations
}

// apply applies the response's JSON patch to raw, as the API server does.
func apply(t *testing.T, raw []byte, resp admission.Response) []byte {
	t.Helper()
	ops, err := json.Marshal(resp.Patches)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := jsonpatch.DecodePatch(ops)
	if err != nil {
		t.Fatal(err)
	}
	out, err := patch.Apply(raw)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestWebhookGivesLargeJobsTheirBand(t *testing.T) {
	w := Webhook{Templates: newClient(t, template("one-gpu", devices(api.DeviceClassGPU, 1)), template("four-gpus", devices(api.DeviceClassGPU, 4)), template("half-share", share("50"))), Bands: bands}
	withClass := func(j *batchv1.Job, class string) *batchv1.Job { j.Labels[PriorityClassLabel] = class; return j }
	withPodPriority := func(j *batchv1.Job) *batchv1.Job { j.Spec.Template.Spec.PriorityClassName = "urgent"; return j }
	unqueued := func(j *batchv1.Job) *batchv1.Job { delete(j.Labels, QueueNameLabel); return j }
	for _, tc := range []struct {
		name       string
		job        *batchv1.Job
		wantClass  string
		wantDemand string // "" for no annotation
	}{
		{name: "a 1-GPU job gets no class, its demand recorded", job: job("small", 1, "one-gpu"), wantDemand: "1"},
		{name: "15 GPUs stay below the first band", job: job("fifteen", 15, "one-gpu"), wantDemand: "15"},
		{name: "a 32-GPU gang gets the first band", job: job("gang", 8, "four-gpus"), wantClass: "gpudra-large", wantDemand: "32"},
		{name: "exactly 16 GPUs reach the first band", job: job("sixteen", 16, "one-gpu"), wantClass: "gpudra-large", wantDemand: "16"},
		{name: "64 GPUs get the second band", job: job("huge", 16, "four-gpus"), wantClass: "gpudra-huge", wantDemand: "64"},
		{name: "a share's part of a GPU is recorded", job: job("inference", 1, "half-share"), wantDemand: "0.5"},
		{name: "a job of no GPUs is recorded as 0", job: job("cpu-only", 4), wantDemand: "0"},
		{name: "the user's priority class wins", job: withClass(job("gang", 8, "four-gpus"), "team-urgent"), wantClass: "team-urgent"},
		{name: "the pods' priorityClassName wins", job: withPodPriority(job("gang", 8, "four-gpus"))},
		{name: "a job Kueue does not queue is left alone", job: unqueued(job("gang", 8, "four-gpus"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, labels, annotations := admit(t, w, admissionv1.Create, tc.job)
			if !resp.Allowed {
				t.Fatalf("denied: %v", resp.Result)
			}
			if got := labels[PriorityClassLabel]; got != tc.wantClass {
				t.Errorf("%s = %q, want %q", PriorityClassLabel, got, tc.wantClass)
			}
			if got := annotations[DemandAnnotation]; got != tc.wantDemand {
				t.Errorf("%s = %q, want %q", DemandAnnotation, got, tc.wantDemand)
			}
		})
	}
}

func TestWebhookLeavesUpdatesAlone(t *testing.T) {
	w := Webhook{Templates: newClient(t, template("four-gpus", devices(api.DeviceClassGPU, 4))), Bands: bands}
	resp, labels, _ := admit(t, w, admissionv1.Update, job("gang", 8, "four-gpus"))
	if !resp.Allowed || len(resp.Patches) > 0 || labels[PriorityClassLabel] != "" {
		t.Errorf("an update was changed: allowed %v, patches %v", resp.Allowed, resp.Patches)
	}
}

// brokenReader fails every read, as an API server that cannot be reached.
type brokenReader struct{ client.Reader }

func (brokenReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return errors.New("connection refused")
}

func TestWebhookAdmitsUnchangedWhatItCannotCount(t *testing.T) {
	resp, labels, annotations := admit(t, Webhook{Templates: brokenReader{}, Bands: bands}, admissionv1.Create, job("gang", 8, "four-gpus"))
	if !resp.Allowed {
		t.Fatalf("refused: %v", resp.Result)
	}
	if labels[PriorityClassLabel] != "" || annotations[DemandAnnotation] != "" {
		t.Errorf("changed without its demand: class %q, demand %q", labels[PriorityClassLabel], annotations[DemandAnnotation])
	}
}

package dependencies

import (
	"context"
	"fmt"
	"net/http"

	"github.com/gpudra/gpudra/internal/mutation"
	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// WebhookPath is where the mutating webhook is served.
const WebhookPath = "/mutate-gpudra-job-dependencies"

// WebhookConfigurationName is the MutatingWebhookConfiguration that sends new Jobs with
// gpudra.dev/run-after to the webhook (the chart's; its CA is injected by name).
const WebhookConfigurationName = "gpudra-job-dependencies"

// Webhook gates new Jobs that run after others: it adds gpudra's gate to Kueue's
// admission gates and refuses bad annotations and cycles.
type Webhook struct {
	// Jobs lists the Jobs of the new job's namespace, to follow their run-after
	// annotations: the API server itself, not a cache, which may not hold yet a job
	// created a moment before the one that closes the cycle.
	Jobs client.Reader
}

var _ admission.Handler = Webhook{}

// Handle admits a new Job with gpudra's gate added, or denies it naming the annotation,
// the accepted values, or the cycle.
func (w Webhook) Handle(ctx context.Context, req admission.Request) admission.Response {
	var job batchv1.Job
	if resp, ok := mutation.DecodeCreate(req, "Job", &job); !ok {
		return resp
	}
	if job.Namespace == "" {
		job.Namespace = req.Namespace
	}
	if job.Name == "" {
		// generateName: no existing job can name it yet, so there is no cycle to find.
		job.Name = req.Name
	}
	gated, denial, err := w.Gate(ctx, &job)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if denial != "" {
		return admission.Denied(denial)
	}
	if !gated {
		return admission.Allowed("")
	}
	return mutation.Patch(req, &job)
}

// Gate adds gpudra's admission gate to a new job that runs after others; gated is false
// when it has no gpudra.dev/run-after. denial, when set, is why the job is refused.
func (w Webhook) Gate(ctx context.Context, job *batchv1.Job) (gated bool, denial string, err error) {
	spec, ok, perr := SpecOf(job.Annotations)
	if perr != nil {
		return false, perr.Error(), nil
	}
	if !ok {
		return false, "", nil
	}
	if job.Labels[QueueNameLabel] == "" {
		return false, fmt.Sprintf("annotation %s needs the job queued by Kueue (label %s): only Kueue holds a job at its admission gate", RunAfterAnnotation, QueueNameLabel), nil
	}
	if job.Name != "" {
		var jobs batchv1.JobList
		if err := w.Jobs.List(ctx, &jobs, client.InNamespace(job.Namespace)); err != nil {
			return false, "", fmt.Errorf("listing the Jobs of namespace %s to look for a cycle: %w", job.Namespace, err)
		}
		if path := Cycle(job.Name, spec.After, edges(jobs.Items)); path != "" {
			return false, fmt.Sprintf("annotation %s: job %s would wait for itself: %s", RunAfterAnnotation, job.Name, path), nil
		}
	}
	if job.Annotations == nil {
		job.Annotations = map[string]string{}
	}
	job.Annotations[AdmissionGatedBy] = withGate(job.Annotations[AdmissionGatedBy])
	return true, "", nil
}

// edges are what each job runs after, by name; annotations that do not parse count as none.
func edges(jobs []batchv1.Job) map[string][]Dependency {
	out := map[string][]Dependency{}
	for _, j := range jobs {
		if v, ok := j.Annotations[RunAfterAnnotation]; ok {
			if deps, err := ParseRunAfter(v); err == nil {
				out[j.Name] = deps
			}
		}
	}
	return out
}

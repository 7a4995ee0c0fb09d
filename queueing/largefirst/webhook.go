package largefirst

import (
	"context"
	"strconv"

	"github.com/gpudra/gpudra/internal/mutation"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

const (
	// QueueNameLabel names a job's Kueue LocalQueue; only such jobs are ordered.
	QueueNameLabel = "kueue.x-k8s.io/queue-name"
	// PriorityClassLabel names a job's WorkloadPriorityClass (Kueue).
	PriorityClassLabel = "kueue.x-k8s.io/priority-class"
	// DemandAnnotation records, on a job the policy gave a band or left below the first,
	// its GPU demand in GPUs ("32", "0.5"). The ageing controller lifts only jobs that
	// carry it.
	DemandAnnotation = "gpudra.dev/gpu-demand"
)

// WebhookPath is where the mutating webhook is served.
const WebhookPath = "/mutate-gpudra-large-jobs-first"

// WebhookConfigurationName is the MutatingWebhookConfiguration that sends new queued Jobs
// to the webhook (the chart's; its CA is injected by name).
const WebhookConfigurationName = "gpudra-large-jobs-first"

// Webhook gives a new queued Job without a priority of its own the WorkloadPriorityClass
// of its band.
type Webhook struct {
	// Templates reads the ResourceClaimTemplates a job's pods name: from the API server,
	// not a cache, as a template is often created just before its job.
	Templates client.Reader
	Bands     Bands
}

var _ admission.Handler = Webhook{}

// Handle admits every Job: a queued one without a priority of its own gets its band's
// class and its demand recorded. A job whose demand cannot be read is admitted unchanged,
// as it would be with the webhook down: the policy orders jobs, it does not guard them.
func (w Webhook) Handle(ctx context.Context, req admission.Request) admission.Response {
	var job batchv1.Job
	if resp, ok := mutation.DecodeCreate(req, "Job", &job); !ok {
		return resp
	}
	if job.Namespace == "" {
		job.Namespace = req.Namespace
	}
	if !Applies(&job) {
		return admission.Allowed("")
	}
	demand, err := Demand(ctx, w.Templates, &job)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Job admitted without a band", "job", klog.KRef(job.Namespace, req.Name))
		return admission.Allowed("its GPU demand could not be read: no band")
	}
	w.Assign(&job, demand)
	return mutation.Patch(req, &job)
}

// Applies reports whether the policy orders job: queued by Kueue, and without a priority
// of its own (a kueue.x-k8s.io/priority-class label or a priorityClassName for its pods),
// which always wins.
func Applies(job *batchv1.Job) bool {
	return job.Labels[QueueNameLabel] != "" && job.Labels[PriorityClassLabel] == "" &&
		job.Spec.Template.Spec.PriorityClassName == ""
}

// Assign records a job's demand, in hundredths of a GPU, and gives it its band's class;
// a job below the first band keeps no class.
func (w Webhook) Assign(job *batchv1.Job, demand int64) {
	if job.Annotations == nil {
		job.Annotations = map[string]string{}
	}
	job.Annotations[DemandAnnotation] = strconv.FormatFloat(float64(demand)/100, 'f', -1, 64)
	if band, ok := w.Bands.For(demand); ok {
		if job.Labels == nil {
			job.Labels = map[string]string{}
		}
		job.Labels[PriorityClassLabel] = band.PriorityClass
	}
}

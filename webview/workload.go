package webview

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/internal/explain"
	"github.com/gpudra/gpudra/queueing/admission"
	"github.com/gpudra/gpudra/queueing/dependencies"
)

// WorkloadPage is the page of one Kueue Workload: its queue, its priority, what its Job
// runs after, whether Kueue reserved quota and admitted it, every admission check with its
// message, and what gpudra explain workload says (pod sets, their counts and domains, what
// the topology check would answer now).
type WorkloadPage struct {
	Namespace    string `json:"namespace"`
	Name         string `json:"name"`
	Queue        string `json:"queue,omitempty"`
	ClusterQueue string `json:"clusterQueue,omitempty"`
	// Job is the batch/v1 Job that owns the Workload, if one does.
	Job string `json:"job,omitempty"`
	// Priority is the Workload's priority and the class it came from.
	Priority *explain.Priority `json:"priority,omitempty"`
	// RunsAfter are the jobs the Job runs after (gpudra.dev/run-after) and where each
	// stands, in the annotation's order; shown to a caller who may list Jobs in the
	// namespace.
	RunsAfter []RunsAfter `json:"runsAfter,omitempty"`
	// Owner is the job of another kind that owns the Workload, as KIND/NAME (jobset/NAME,
	// pytorchjob/NAME, trainjob/NAME), if one does.
	Owner    string `json:"owner,omitempty"`
	Admitted bool   `json:"admitted"`
	// Waiting says why the Workload is not admitted yet ("" once it is).
	Waiting string `json:"waiting,omitempty"`
	// Checks are the Workload's admission checks, each with its state and message.
	Checks []admission.CheckState `json:"checks,omitempty"`
	// Explanation is what gpudra explain workload reports.
	Explanation *admission.Report `json:"explanation,omitempty"`
	Error       string            `json:"error,omitempty"`
}

// jobSetNameLabel is the JobSet a pod of a JobSet's Job belongs to, as the JobSet
// controller labels it.
const jobSetNameLabel = "jobset.sigs.k8s.io/jobset-name"

func (s *Server) workloadPage(r *http.Request, sc *scope) (string, string, any, int) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	p, found := s.explainWorkload(sc, ns, name)
	status := http.StatusOK
	if !found {
		status = http.StatusNotFound
	}
	return "Workload " + ns + "/" + name, "queues", p, status
}

// RunsAfter is one job a Workload's Job runs after, where it stands, and the Workload Kueue
// made for it, when there is one the caller may read.
type RunsAfter struct {
	dependencies.Status
	Workload string `json:"workload,omitempty"`
}

// explainWorkload explains a Workload; found is false when the caller may not read it,
// it does not exist or Kueue's Workloads are not read.
func (s *Server) explainWorkload(sc *scope, ns, name string) (WorkloadPage, bool) {
	p := WorkloadPage{Namespace: ns, Name: name}
	wl := s.visibleWorkload(sc, ns, name)
	if wl == nil {
		p.Error = "Workload " + ns + "/" + name + " not found"
		return p, false
	}
	p.Queue = string(wl.Spec.QueueName)
	for _, lq := range readKueue[kueue.LocalQueue](s, sc, localQueuesGVR, true) {
		if lq.Namespace == ns && lq.Name == p.Queue {
			p.ClusterQueue = string(lq.Spec.ClusterQueue)
		}
	}
	if wl.Status.Admission != nil {
		p.ClusterQueue = string(wl.Status.Admission.ClusterQueue)
	}
	if owner := explain.JobOf(wl); owner != "" {
		if job, ok := strings.CutPrefix(owner, explain.BatchJob.Name+"/"); ok {
			p.Job = job
		} else {
			p.Owner = owner
		}
	}
	p.Admitted = meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted)
	for _, c := range wl.Status.AdmissionChecks {
		p.Checks = append(p.Checks, admission.CheckState{Name: string(c.Name), State: string(c.State), Message: c.Message,
			RequeueAfterSeconds: c.RequeueAfterSeconds, RetryCount: c.RetryCount})
	}
	// The priority is the Workload's own, shown even when the rest cannot be explained.
	p.Priority = explain.PriorityOf(wl)
	rep, err := explain.WorkloadOf(sc.ctx, scopeReader{s, sc}, s.labels, wl)
	if err != nil {
		p.Error = err.Error()
	} else {
		p.Explanation = rep.Workload
		for _, st := range rep.RunsAfter {
			ra := RunsAfter{Status: st}
			if st.Kind == dependencies.KindJob {
				if dep, err := explain.FindJobWorkload(sc.ctx, scopeReader{s, sc}, ns, explain.BatchJob, st.Name); err == nil {
					ra.Workload = dep.Name
				}
			}
			p.RunsAfter = append(p.RunsAfter, ra)
		}
	}
	p.Waiting = waiting(wl, p)
	return p, true
}

// waiting says what the Workload waits for: quota, then its admission checks.
func waiting(wl *kueue.Workload, p WorkloadPage) string {
	if p.Admitted || meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadFinished) {
		return ""
	}
	if !meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved) {
		why := "Kueue has not reserved quota"
		if e := p.Explanation; e != nil && e.Quota != nil {
			why += fmt.Sprintf(" (%s)", e.Quota.Reason)
			if e.Quota.Message != "" {
				why += ": " + e.Quota.Message
			}
		}
		return why
	}
	for _, c := range p.Checks {
		if c.State != string(kueue.CheckStateReady) {
			why := fmt.Sprintf("admission check %s is %s", c.Name, c.State)
			if c.Message != "" {
				why += ": " + c.Message
			}
			return why
		}
	}
	return "Kueue has not admitted it yet"
}

// visibleWorkload is the Workload, if the caller may read it.
func (s *Server) visibleWorkload(sc *scope, ns, name string) *kueue.Workload {
	if !sc.can(workloadsGVR.GroupResource(), ns) {
		return nil
	}
	for _, wl := range readKueue[kueue.Workload](s, sc, workloadsGVR, true) {
		if wl.Namespace == ns && wl.Name == name {
			return wl
		}
	}
	return nil
}

// podWorkload names the Workload a pod belongs to, if the caller may read it: Kueue's
// Workload for the job that owns the pod (a Job, a PyTorchJob), for the JobSet whose Job
// owns it or the TrainJob that JobSet runs (named alike), or for the pod itself.
func (s *Server) podWorkload(sc *scope, pod *corev1.Pod) string {
	if !sc.can(workloadsGVR.GroupResource(), pod.Namespace) {
		return ""
	}
	for _, wl := range readKueue[kueue.Workload](s, sc, workloadsGVR, true) {
		if wl.Namespace != pod.Namespace {
			continue
		}
		for _, o := range pod.OwnerReferences {
			if o.Controller == nil || !*o.Controller {
				continue
			}
			for _, k := range explain.JobKinds {
				if k.Kind == o.Kind && explain.OwnedBy(wl, k, o.Name) {
					return wl.Name
				}
			}
		}
		if js := pod.Labels[jobSetNameLabel]; js != "" && (explain.OwnedBy(wl, explain.JobSet, js) || explain.OwnedBy(wl, explain.TrainJob, js)) {
			return wl.Name
		}
		for _, o := range wl.OwnerReferences {
			if o.Kind == "Pod" && o.UID == pod.UID {
				return wl.Name
			}
		}
	}
	return ""
}

// The workload page reads what the topology admission check reads through scopeReader's
// Get and List, each kind as far as the caller may read it; Kueue's events are not read.

func (r scopeReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	sc, s := r.sc, r.s
	var found client.Object
	switch o := obj.(type) {
	case *kueue.Workload:
		if wl := s.visibleWorkload(sc, key.Namespace, key.Name); wl != nil {
			*o, found = *wl, o
		}
	case *kueue.AdmissionCheck:
		for _, ac := range readKueue[kueue.AdmissionCheck](s, sc, admissionChecksGVR, false) {
			if ac.Name == key.Name {
				*o, found = *ac, o
			}
		}
	case *kueue.ResourceFlavor:
		if sc.canCluster(resourceFlavorsResource) {
			rf, err := s.src.resourceFlavor(sc.ctx, key.Name)
			if err != nil {
				return r.failed(err)
			}
			*o, found = *rf, o
		}
	case *resourceapi.ResourceClaimTemplate:
		if sc.can(templatesResource, key.Namespace) {
			t, err := s.src.claimTemplate(sc.ctx, key.Namespace, key.Name)
			if err != nil {
				return r.failed(err)
			}
			*o, found = *t, o
		}
	case *batchv1.Job:
		// A caller who may not list Jobs gets the page without the chain.
		if !sc.can(jobsResource, key.Namespace) {
			if err := r.failed(nil); err != nil {
				return err
			}
			return apierrors.NewForbidden(jobsResource, key.Name, fmt.Errorf("the caller may not list jobs in namespace %s", key.Namespace))
		}
		j, err := s.src.job(sc.ctx, key.Namespace, key.Name)
		if err != nil {
			return err
		}
		*o, found = *j, o
	case *unstructured.Unstructured:
		// A JobSet a Job runs after: the view does not read JobSets, and shows the chain
		// only where it can tell where each of its jobs stands.
		return apierrors.NewForbidden(schema.GroupResource{Group: o.GroupVersionKind().Group, Resource: o.GetKind()}, key.Name,
			fmt.Errorf("the web view does not read %s", o.GetKind()))
	default:
		return fmt.Errorf("webview: reading a %T is not supported", obj)
	}
	if err := r.failed(nil); err != nil {
		return err
	}
	if found == nil {
		return apierrors.NewNotFound(resourceOf(obj), key.Name)
	}
	return nil
}

func (r scopeReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	lo := (&client.ListOptions{}).ApplyOptions(opts)
	var err error
	switch l := list.(type) {
	case *corev1.NodeList:
		l.Items, err = values(r.Nodes(ctx))
	case *corev1.PodList:
		var pods []*corev1.Pod
		pods, err = r.s.visiblePods(r.sc)
		l.Items, err = values(pods, r.failed(err))
	case *resourceapi.ResourceSliceList:
		l.Items, err = values(r.Slices(ctx))
	case *resourceapi.DeviceClassList:
		l.Items, err = values(r.Classes(ctx))
	case *resourceapi.ResourceClaimList:
		l.Items, err = values(r.Claims(ctx))
	case *kueue.WorkloadList:
		l.Items = nil
		for _, wl := range readKueue[kueue.Workload](r.s, r.sc, workloadsGVR, true) {
			if lo.Namespace == "" || wl.Namespace == lo.Namespace {
				l.Items = append(l.Items, *wl)
			}
		}
		return r.failed(nil)
	default:
		return fmt.Errorf("webview: listing a %T is not supported", list)
	}
	if err == nil && lo.Namespace != "" {
		return fmt.Errorf("webview: listing a %T in one namespace is not supported", list)
	}
	return err
}

// QuotaEvent is nil: the view does not read events.
func (scopeReader) QuotaEvent(context.Context, *kueue.Workload) *admission.Condition { return nil }

// values copies the objects a list points at into the list's items.
func values[T any](objs []*T, err error) ([]T, error) {
	if err != nil {
		return nil, err
	}
	out := make([]T, len(objs))
	for k, o := range objs {
		out[k] = *o
	}
	return out, nil
}

// resourceOf names the resource of the kinds scopeReader gets, for a NotFound error.
func resourceOf(obj client.Object) schema.GroupResource {
	switch obj.(type) {
	case *kueue.Workload:
		return workloadsGVR.GroupResource()
	case *kueue.AdmissionCheck:
		return admissionChecksGVR.GroupResource()
	case *kueue.ResourceFlavor:
		return resourceFlavorsResource
	case *batchv1.Job:
		return batchv1.Resource("jobs")
	default:
		return templatesResource
	}
}

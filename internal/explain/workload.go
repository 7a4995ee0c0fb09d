package explain

import (
	"context"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/queueing/admission"
	"github.com/gpudra/gpudra/queueing/dependencies"
	"github.com/gpudra/gpudra/topology"
)

// WorkloadReader is where a Workload's explanation reads: the Workloads, and what the
// gpudra.dev/topology admission check reads (nodes, pods, the DRA objects, AdmissionChecks,
// ResourceFlavors and ResourceClaimTemplates), through Get and List as a controller-runtime
// client does. The CLI reads the API server; the web view its caches, filtered to what the
// caller may read.
type WorkloadReader interface {
	client.Reader
	// QuotaEvent is, for a Workload Kueue reserved no quota for, Kueue's reason from the
	// events it recorded on it (admission.KueueEventReason); nil when there is none or the
	// events are not read.
	QuotaEvent(ctx context.Context, wl *kueue.Workload) *admission.Condition
}

// Workload explains workload/NAME: what the topology admission check sees of it.
func Workload(ctx context.Context, r WorkloadReader, labels topology.LabelKeys, namespace, name string) (*Report, error) {
	var wl kueue.Workload
	if err := r.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &wl); err != nil {
		return nil, err
	}
	return WorkloadOf(ctx, r, labels, &wl)
}

// JobWorkload explains the Workload Kueue made for the job of that kind named name (the
// newest, when there are several).
func JobWorkload(ctx context.Context, r WorkloadReader, labels topology.LabelKeys, namespace string, kind JobKind, name string) (*Report, error) {
	wl, err := FindJobWorkload(ctx, r, namespace, kind, name)
	if err != nil {
		return nil, err
	}
	return WorkloadOf(ctx, r, labels, wl)
}

// WorkloadOf explains a Workload already read. While Kueue has not reserved quota and the
// Workload carries no condition saying why, Kueue's event says it.
func WorkloadOf(ctx context.Context, r WorkloadReader, labels topology.LabelKeys, wl *kueue.Workload) (*Report, error) {
	rep, err := admission.Explain(ctx, r, labels, wl)
	if err != nil {
		return nil, err
	}
	if rep.Quota == nil && !rep.QuotaReserved {
		rep.Quota = r.QuotaEvent(ctx, wl)
	}
	after, err := runsAfter(ctx, r, wl)
	if err != nil {
		return nil, err
	}
	return &Report{Workload: rep, Priority: PriorityOf(wl), RunsAfter: after}, nil
}

// Priority is what Kueue orders a Workload by within its ClusterQueue and what preemption
// compares: the value of a WorkloadPriorityClass named by the job's
// kueue.x-k8s.io/priority-class label, else of its pods' PriorityClass (priorityClassName,
// or the cluster's globalDefault class), else 0.
type Priority struct {
	Value int32 `json:"value"`
	// Kind is where the value came from: WorkloadPriorityClass or PriorityClass; empty
	// when no class gave it.
	Kind string `json:"kind,omitempty"`
	// Class is the name of that class.
	Class string `json:"class,omitempty"`
}

// String is "1000 (PriorityClass high)", or "0 (no priority class)".
func (p Priority) String() string {
	if p.Kind == "" {
		return fmt.Sprintf("%d (no priority class)", p.Value)
	}
	return fmt.Sprintf("%d (%s %s)", p.Value, p.Kind, p.Class)
}

// PriorityOf is the priority Kueue gave the Workload when it made it (spec.priority and
// spec.priorityClassRef).
func PriorityOf(wl *kueue.Workload) *Priority {
	p := &Priority{}
	if wl.Spec.Priority != nil {
		p.Value = *wl.Spec.Priority
	}
	if ref := wl.Spec.PriorityClassRef; ref != nil {
		p.Kind, p.Class = string(ref.Kind), ref.Name
	}
	return p
}

// runsAfter are the dependencies of the Workload's Job and where each stands; none when
// its Job has no gpudra.dev/run-after, or is gone. The chain is an addition to the
// Workload's explanation: a caller who may read Workloads but not Jobs still gets that.
func runsAfter(ctx context.Context, r client.Reader, wl *kueue.Workload) ([]dependencies.Status, error) {
	for _, o := range wl.OwnerReferences {
		if !OwnedBy(wl, BatchJob, o.Name) {
			continue
		}
		var job batchv1.Job
		if err := r.Get(ctx, types.NamespacedName{Namespace: wl.Namespace, Name: o.Name}, &job); err != nil {
			if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
				return nil, nil
			}
			return nil, err
		}
		spec, ok, err := dependencies.SpecOf(job.Annotations)
		if !ok || err != nil {
			return nil, nil
		}
		after, err := dependencies.Statuses(ctx, r, r, wl.Namespace, spec.After)
		if apierrors.IsForbidden(err) {
			return nil, nil
		}
		return after, err
	}
	return nil, nil
}

// JobKind is a kind of job Kueue makes Workloads for, as its owner reference names it.
type JobKind struct {
	// Group is the kind's API group; Kind its kind; Name how gpudra explain names it
	// (KIND/NAME).
	Group, Kind, Name string
}

// The job kinds explain resolves.
var (
	BatchJob   = JobKind{Group: batchv1.GroupName, Kind: "Job", Name: "job"}
	JobSet     = JobKind{Group: "jobset.x-k8s.io", Kind: "JobSet", Name: "jobset"}
	PyTorchJob = JobKind{Group: "kubeflow.org", Kind: "PyTorchJob", Name: "pytorchjob"}
	TFJob      = JobKind{Group: "kubeflow.org", Kind: "TFJob", Name: "tfjob"}
	// TrainJob is Kubeflow Trainer's; its pods are those of the JobSet of the same name
	// that Trainer makes for it.
	TrainJob = JobKind{Group: "trainer.kubeflow.org", Kind: "TrainJob", Name: "trainjob"}
)

// JobKinds are the job kinds explain resolves.
var JobKinds = []JobKind{BatchJob, JobSet, PyTorchJob, TFJob, TrainJob}

// JobOf is the job that owns the Workload, as KIND/NAME (job/train, jobset/train), or "".
func JobOf(wl *kueue.Workload) string {
	for _, o := range wl.OwnerReferences {
		for _, k := range JobKinds {
			if OwnedBy(wl, k, o.Name) {
				return k.Name + "/" + o.Name
			}
		}
	}
	return ""
}

// FindJobWorkload is the newest Workload in namespace owned by the job of that kind named
// name.
func FindJobWorkload(ctx context.Context, r client.Reader, namespace string, kind JobKind, name string) (*kueue.Workload, error) {
	var list kueue.WorkloadList
	if err := r.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	var found *kueue.Workload
	for k := range list.Items {
		if OwnedBy(&list.Items[k], kind, name) && (found == nil || list.Items[k].CreationTimestamp.After(found.CreationTimestamp.Time)) {
			found = &list.Items[k]
		}
	}
	if found == nil {
		return nil, fmt.Errorf("no Workload in namespace %s is owned by %s %s: Kueue makes one for a %s with label %s", namespace, kind.Kind, name, kind.Kind, "kueue.x-k8s.io/queue-name")
	}
	return found, nil
}

// OwnedBy is whether the Workload's owners include the job of that kind named name.
func OwnedBy(wl *kueue.Workload, kind JobKind, name string) bool {
	for _, o := range wl.OwnerReferences {
		if o.Kind == kind.Kind && o.Name == name && strings.HasPrefix(o.APIVersion, kind.Group+"/") {
			return true
		}
	}
	return false
}

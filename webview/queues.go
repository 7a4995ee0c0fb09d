package webview

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// QueueView is one ClusterQueue's quota and usage in GPUs (its gpudra.dev/gpu-percent / 100,
// plus its gpudra.dev/gpu where whole GPUs are charged by count).
type QueueView struct {
	Name, Cohort                        string
	Nominal, Borrowing, Usage, Borrowed string
	UsagePercent                        int
	Pending, Reserving, Admitted        int32
	Resources                           []string
	nominal, usage                      resource.Quantity
}

// CohortView is a cohort with its parent and ClusterQueues.
type CohortView struct {
	Name, Parent string
	Queues       []string
	Nominal      string
	Usage        string
}

// PendingWorkload is a Workload without quota or admission, with what gpudra's check says.
type PendingWorkload struct {
	Namespace, Name, Queue, ClusterQueue string
	Priority                             int32
	Created                              string
	QuotaReserved                        bool
	Reason                               string
	Check, CheckState, CheckMessage      string
	// Job is the owning Job, for links to its pods.
	Job string
}

// Queues is the queues page.
type Queues struct {
	Served bool
	// Unread are the Kueue resources not read (yet): not served, or not allowed.
	Unread  []string
	Cohorts []CohortView
	Queues  []QueueView
	Pending []PendingWorkload
	// List is the filters and page asked for: ClusterQueues by name, pending Workloads by
	// namespace and queue.
	List  Listing
	Error string
}

// readKueue reads the cached objects of one Kueue resource the caller may read; the
// caches hold them typed (typedKueue), and the view only reads them.
func readKueue[T any](s *Server, sc *scope, gvr schema.GroupVersionResource, namespaced bool) []*T {
	if !namespaced && !sc.canCluster(gvr.GroupResource()) {
		return nil
	}
	objs := s.src.kueueList(sc.ctx, gvr)
	out := make([]*T, 0, len(objs))
	for _, o := range objs {
		m, err := meta.Accessor(o)
		if err != nil || (namespaced && !sc.can(gvr.GroupResource(), m.GetNamespace())) {
			continue
		}
		if typed, ok := any(o).(*T); ok {
			out = append(out, typed)
		}
	}
	return out
}

func (s *Server) queues(sc *scope) Queues {
	q := Queues{Served: s.src.kueueServed()}
	if !q.Served {
		return q
	}
	for _, gvr := range KueueResources {
		if !s.src.kueueRead(gvr) {
			q.Unread = append(q.Unread, gvr.Resource)
		}
	}
	cohorts := map[string]*CohortView{}
	cohortOf := func(name string) *CohortView {
		c := cohorts[name]
		if c == nil {
			c = &CohortView{Name: name}
			cohorts[name] = c
		}
		return c
	}
	for _, c := range readKueue[kueue.Cohort](s, sc, cohortsGVR, false) {
		cohortOf(c.Name).Parent = string(c.Spec.ParentName)
	}
	cohortNominal := map[string]*resource.Quantity{}
	cohortUsage := map[string]*resource.Quantity{}
	for _, cq := range readKueue[kueue.ClusterQueue](s, sc, clusterQueuesGVR, false) {
		v := QueueView{Name: cq.Name, Cohort: string(cq.Spec.CohortName),
			Pending: cq.Status.PendingWorkloads, Reserving: cq.Status.ReservingWorkloads, Admitted: cq.Status.AdmittedWorkloads}
		var borrowing resource.Quantity
		hasBorrowing := false
		for _, rg := range cq.Spec.ResourceGroups {
			for _, r := range rg.CoveredResources {
				if !slices.Contains(v.Resources, string(r)) {
					v.Resources = append(v.Resources, string(r))
				}
			}
			for _, f := range rg.Flavors {
				for _, r := range f.Resources {
					nominal, ok := asGPUPercent(r.Name, r.NominalQuota)
					if !ok {
						continue
					}
					v.nominal.Add(nominal)
					if r.BorrowingLimit != nil {
						hasBorrowing = true
						limit, _ := asGPUPercent(r.Name, *r.BorrowingLimit)
						borrowing.Add(limit)
					}
				}
			}
		}
		var borrowed resource.Quantity
		for _, f := range cq.Status.FlavorsUsage {
			for _, r := range f.Resources {
				if total, ok := asGPUPercent(r.Name, r.Total); ok {
					b, _ := asGPUPercent(r.Name, r.Borrowed)
					v.usage.Add(total)
					borrowed.Add(b)
				}
			}
		}
		v.Nominal, v.Usage, v.Borrowed = gpus(v.nominal), gpus(v.usage), gpus(borrowed)
		v.Borrowing = "-"
		if hasBorrowing {
			v.Borrowing = gpus(borrowing)
		} else if v.Cohort != "" {
			v.Borrowing = "unlimited"
		}
		if !v.nominal.IsZero() {
			v.UsagePercent = int(min(100, v.usage.AsApproximateFloat64()*100/v.nominal.AsApproximateFloat64()+0.5))
		}
		if v.Cohort != "" {
			c := cohortOf(v.Cohort)
			c.Queues = append(c.Queues, cq.Name)
			if cohortNominal[v.Cohort] == nil {
				cohortNominal[v.Cohort], cohortUsage[v.Cohort] = &resource.Quantity{}, &resource.Quantity{}
			}
			cohortNominal[v.Cohort].Add(v.nominal)
			cohortUsage[v.Cohort].Add(v.usage)
		}
		q.Queues = append(q.Queues, v)
	}
	for name, c := range cohorts {
		if n := cohortNominal[name]; n != nil {
			c.Nominal, c.Usage = gpus(*n), gpus(*cohortUsage[name])
		}
		slices.Sort(c.Queues)
		q.Cohorts = append(q.Cohorts, *c)
	}
	slices.SortFunc(q.Cohorts, func(a, b CohortView) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(q.Queues, func(a, b QueueView) int { return cmp.Compare(a.Name, b.Name) })

	ours := map[string]bool{}
	for _, ac := range readKueue[kueue.AdmissionCheck](s, sc, admissionChecksGVR, false) {
		if ac.Spec.ControllerName == api.AdmissionCheckController {
			ours[ac.Name] = true
		}
	}
	localQueues := map[string]string{}
	for _, lq := range readKueue[kueue.LocalQueue](s, sc, localQueuesGVR, true) {
		localQueues[lq.Namespace+"/"+lq.Name] = string(lq.Spec.ClusterQueue)
	}
	for _, wl := range readKueue[kueue.Workload](s, sc, workloadsGVR, true) {
		if meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted) ||
			meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadFinished) {
			continue
		}
		p := PendingWorkload{Namespace: wl.Namespace, Name: wl.Name, Queue: string(wl.Spec.QueueName),
			Created: wl.CreationTimestamp.UTC().Format("2006-01-02 15:04:05")}
		p.ClusterQueue = localQueues[wl.Namespace+"/"+p.Queue]
		if wl.Status.Admission != nil {
			p.ClusterQueue = string(wl.Status.Admission.ClusterQueue)
		}
		if wl.Spec.Priority != nil {
			p.Priority = *wl.Spec.Priority
		}
		if c := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadQuotaReserved); c != nil {
			p.QuotaReserved = c.Status == "True"
			if !p.QuotaReserved {
				p.Reason = c.Message
			}
		}
		for _, ac := range wl.Status.AdmissionChecks {
			if ours[string(ac.Name)] {
				p.Check, p.CheckState, p.CheckMessage = string(ac.Name), string(ac.State), ac.Message
			}
		}
		for _, o := range wl.OwnerReferences {
			if o.Kind == "Job" {
				p.Job = o.Name
			}
		}
		q.Pending = append(q.Pending, p)
	}
	slices.SortFunc(q.Pending, func(a, b PendingWorkload) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), cmp.Compare(a.Created, b.Created), cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name))
	})
	return q
}

// asGPUPercent is an amount of a quota resource in gpudra.dev/gpu-percent, and whether the
// resource counts GPUs: gpudra.dev/gpu-percent as it is, and gpudra.dev/gpu (whole GPUs
// charged by count) at 100 a GPU, so that a queue's GPUs are one number in either
// configuration.
func asGPUPercent(name corev1.ResourceName, q resource.Quantity) (resource.Quantity, bool) {
	switch string(name) {
	case api.QuotaGPUPercent:
		return q, true
	case api.QuotaGPU:
		return *resource.NewQuantity(q.Value()*100, resource.DecimalSI), true
	}
	return resource.Quantity{}, false
}

// gpus writes an amount of gpudra.dev/gpu-percent in GPUs: "4", "2.5", "0.13".
func gpus(percent resource.Quantity) string {
	v := percent.Value()
	if v%100 == 0 {
		return strconv.FormatInt(v/100, 10)
	}
	return strings.TrimRight(strconv.FormatFloat(float64(v)/100, 'f', 2, 64), "0")
}

package admission

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	schedulingcorev1 "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/queueing/gang"
	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// Report is what the gpudra.dev/topology admission check sees of a Workload's gang.
type Report struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// QuotaReserved: Kueue reserved quota, the check decides only then.
	QuotaReserved bool `json:"quotaReserved"`
	// Quota is the Workload's QuotaReserved condition when it is not True: why Kueue did not
	// reserve quota (reason Pending, Inadmissible or AdmissionGated, and Kueue's message,
	// such as a claim template Kueue cannot charge). Nil when quota is reserved or Kueue has
	// not looked at the Workload yet.
	Quota *Condition `json:"quota,omitempty"`
	// Check is the check's state on the Workload; nil when the Workload has no admission
	// check whose AdmissionCheck names controller gpudra.dev/topology.
	Check *CheckState `json:"check,omitempty"`
	// Now is what the check would answer now, planned on the devices free now. The
	// controller also holds the devices of gangs it admitted whose pods have not started,
	// which a read from outside it does not see.
	Now CheckState `json:"now"`
	// TerminatingPods hold devices that are about to be freed: while there are any, the
	// check waits instead of answering Retry.
	TerminatingPods int            `json:"terminatingPods,omitempty"`
	PodSets         []PodSetReport `json:"podSets"`
}

// CheckState is an admission check's state and message.
type CheckState struct {
	Name                string `json:"name,omitempty"`
	State               string `json:"state"`
	Message             string `json:"message,omitempty"`
	RequeueAfterSeconds *int32 `json:"requeueAfterSeconds,omitempty"`
	RetryCount          *int32 `json:"retryCount,omitempty"`
}

// Condition is a condition Kueue set on the Workload.
type Condition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// PodSetReport is one pod set and how it fits in each domain of its required level.
type PodSetReport struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
	// ClaimTemplates are the ResourceClaimTemplates each pod gets a claim from.
	ClaimTemplates []string `json:"claimTemplates,omitempty"`
	// Claims counts the claims planned per pod: the templates' and the one kube-scheduler
	// makes for DRA-backed extended resources.
	Claims int `json:"claims"`
	// Required is the pod set's gpudra.dev/required-topology ("" keeps it anywhere).
	Required      string `json:"required,omitempty"`
	SliceSize     int    `json:"sliceSize,omitempty"`
	SliceRequired string `json:"sliceRequired,omitempty"`
	// SliceNetwork is the slices' gpudra.dev/slice-topology: kept in one domain of that
	// level where its switch is oversubscribed, preferably where it is not.
	SliceNetwork string `json:"sliceNetwork,omitempty"`
	// Subslice* are the same for the subslices inside each slice.
	SubsliceSize     int               `json:"subsliceSize,omitempty"`
	SubsliceRequired string            `json:"subsliceRequired,omitempty"`
	SubsliceNetwork  string            `json:"subsliceNetwork,omitempty"`
	NodeSelector     map[string]string `json:"nodeSelector,omitempty"`
	// Domains are the domains at the required level (one, the cluster, without one).
	Domains []DomainReport `json:"domains"`
	// Planned is where the whole gang's plan puts the pod set, when the gang fits.
	Planned *Planned `json:"planned,omitempty"`
}

// DomainReport says how many of a pod set's pods fit in one domain, on their own.
type DomainReport struct {
	// Name is the domain as the check names it: block, block/rack, block/rack/tor or host
	// ("" for the cluster).
	Name  string   `json:"name"`
	Block string   `json:"block,omitempty"`
	Rack  string   `json:"rack,omitempty"`
	ToR   string   `json:"tor,omitempty"`
	Nodes []string `json:"nodes"`
	// LeftOut are the domain's nodes the pods may not be bound to, with why.
	LeftOut []NodeReason `json:"leftOut,omitempty"`
	// Fits is how many of the set's pods fit in the domain alone, on the devices free now
	// (whole slices when the set is sliced); Fit: all of them do.
	Fits int  `json:"fits"`
	Fit  bool `json:"fit"`
	// Reason is the check's own reason when not all fit.
	Reason string `json:"reason,omitempty"`
	// Data says, for each dataset the pod set reads, on how many of the domain's nodes it
	// is cached ("dataset team/imagenet cached on 3 of 4 nodes of b1/r2").
	Data []string `json:"data,omitempty"`
}

// NodeReason is a node and why it is left out.
type NodeReason struct {
	Node   string `json:"node"`
	Reason string `json:"reason"`
}

// Planned is a pod set's domain and its pods' nodes.
type Planned struct {
	Domain string   `json:"domain,omitempty"`
	Nodes  []string `json:"nodes"`
	// Notes say which ToR (or block) rule kept slices where they are, and why.
	Notes []string `json:"notes,omitempty"`
}

// Explain reports what the check sees of the Workload, read through c (no writes): its
// pod sets as the check builds them, the domains of the nodes labelled with labels, how
// many pods of each set fit in each domain, what the check would answer now, and the
// check's state on the Workload.
func Explain(ctx context.Context, c client.Reader, labels topology.LabelKeys, wl *kueue.Workload) (*Report, error) {
	rep := &Report{Namespace: wl.Namespace, Name: wl.Name,
		QuotaReserved: apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved)}
	if c := apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadQuotaReserved); c != nil && !rep.QuotaReserved {
		rep.Quota = &Condition{Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: c.Message}
	}
	checkName, err := gpudraCheck(ctx, c, wl)
	if err != nil {
		return nil, err
	}
	if s := findCheck(wl, checkName); checkName != "" && s != nil {
		rep.Check = &CheckState{Name: string(s.Name), State: string(s.State), Message: s.Message, RequeueAfterSeconds: s.RequeueAfterSeconds, RetryCount: s.RetryCount}
	}
	sets, err := podSets(ctx, c, wl)
	var bad badInput
	if errors.As(err, &bad) {
		rep.Now = CheckState{State: string(kueue.CheckStateRejected), Message: bad.Error()}
		return rep, nil
	}
	if err != nil {
		return nil, err
	}
	st, _, err := liveState(ctx, c)
	if err != nil {
		return nil, err
	}
	net, nodeLabels, taints, err := networkOf(ctx, c, labels)
	if err != nil {
		return nil, err
	}
	for i, set := range sets {
		ps := PodSetReport{Name: set.Name, Count: set.Count, Claims: len(set.Claims), Required: set.Required,
			SliceSize: set.SliceSize, SliceRequired: set.SliceRequired, SliceNetwork: set.SliceNetwork,
			SubsliceSize: set.SubsliceSize, SubsliceRequired: set.SubsliceRequired, SubsliceNetwork: set.SubsliceNetwork,
			NodeSelector: set.NodeSelector}
		for _, rc := range wl.Spec.PodSets[i].Template.Spec.ResourceClaims {
			if rc.ResourceClaimTemplateName != nil {
				ps.ClaimTemplates = append(ps.ClaimTemplates, *rc.ResourceClaimTemplateName)
			}
		}
		if ps.Domains, err = domainsOf(ctx, st, net, nodeLabels, taints, labels, set); err != nil {
			return nil, err
		}
		rep.PodSets = append(rep.PodSets, ps)
	}
	if err := refusedBeforePlanning(wl, sets, st, nil); err != nil {
		rep.Now = CheckState{State: string(kueue.CheckStateRejected), Message: err.Error()}
		return rep, nil
	}
	placement, _, err := gang.Plan(ctx, st, net, taints, sets)
	if err == nil {
		err = refusedAsPlaced(wl, sets, st, placement)
	}
	switch {
	case gang.IsUnplaceable(err):
		rep.Now = CheckState{State: string(kueue.CheckStateRetry), Message: err.Error(), RequeueAfterSeconds: ptr.To(int32(RetryAfter / time.Second))}
		if rep.TerminatingPods, err = terminatingPods(ctx, c, time.Now()); err != nil {
			return nil, err
		}
	case err != nil:
		rep.Now = CheckState{State: string(kueue.CheckStateRejected), Message: err.Error()}
	default:
		var where []string
		for k, set := range sets {
			domain := placement.Domains[set.Name]
			rep.PodSets[k].Planned = &Planned{Domain: domain, Nodes: placement.Nodes[set.Name], Notes: placement.Notes[set.Name]}
			if set.Required != "" {
				where = append(where, fmt.Sprintf("%s in %s %s", set.Name, set.Required, domain))
			}
			for _, note := range placement.Notes[set.Name] {
				where = append(where, set.Name+": "+note)
			}
		}
		rep.Now = CheckState{State: string(kueue.CheckStateReady),
			Message: "gang fits: " + strings.Join(append(where, fmt.Sprintf("%d pods placed", countPods(placement))), "; ")}
	}
	return rep, nil
}

// domainsOf plans the pod set alone in each domain of its required level.
func domainsOf(ctx context.Context, st *allocation.State, net *topology.Network, all map[string]map[string]string, taints gang.Taints, labels topology.LabelKeys, set gang.PodSet) ([]DomainReport, error) {
	level := set.Required
	if level == "" {
		level = topology.LevelBlock
	}
	domains, err := net.Domains(level)
	if err != nil {
		return nil, err
	}
	if set.Required == "" {
		var all []string
		for _, d := range domains {
			all = append(all, d.Nodes...)
		}
		sort.Strings(all)
		domains = []topology.Domain{{Nodes: all}}
	}
	logger := klog.FromContext(ctx)
	var out []DomainReport
	for _, d := range domains {
		dr := DomainReport{Name: d.Name, Nodes: d.Nodes}
		if set.Required != "" && len(d.Nodes) > 0 {
			loc, _ := net.Location(d.Nodes[0])
			dr.Block = loc.Block
			if level != topology.LevelBlock {
				dr.Rack = loc.Rack
			}
			if level == topology.LevelToR {
				dr.ToR = loc.ToR
			}
		}
		nodeLabels := map[string]map[string]string{}
		for _, n := range d.Nodes {
			switch {
			case !net.Matches(n, set.NodeSelector):
				dr.LeftOut = append(dr.LeftOut, NodeReason{Node: n, Reason: allocation.ReasonNodeAffinity})
			default:
				if t, bad := schedulingcorev1.FindMatchingUntoleratedTaint(logger, taints[n], set.Tolerations, doNotSchedule, true); bad {
					dr.LeftOut = append(dr.LeftOut, NodeReason{Node: n, Reason: allocation.ReasonUntoleratedTaint + ": " + t.ToString()})
				}
			}
			nodeLabels[n] = all[n]
		}
		sub, err := topology.NetworkFromLabels(nodeLabels, labels)
		if err != nil {
			return nil, err
		}
		where := d.Name
		if where == "" {
			where = "the cluster"
		}
		for _, need := range set.Data {
			dr.Data = append(dr.Data, gang.CachedText(net, need, d.Nodes, where))
		}
		dr.Fits, dr.Reason = fitsIn(ctx, st, sub, taints, set)
		dr.Fit = dr.Fits == set.Count
		out = append(out, dr)
	}
	return out, nil
}

// fitsIn is how many of the set's pods the check's planning places in the network, in
// whole slices for a sliced set, and the reason the whole set does not fit.
func fitsIn(ctx context.Context, st *allocation.State, net *topology.Network, taints gang.Taints, set gang.PodSet) (int, string) {
	unit := 1
	switch {
	case set.SliceSize > 0:
		unit = set.SliceSize
	case set.SubsliceSize > 0:
		unit = set.SubsliceSize
	}
	try := func(slices int) (bool, string) {
		trial := set
		trial.Count = slices * unit
		// Unplaceable (not now) and bad input (never, on these nodes) both mean it does not fit.
		if _, _, err := gang.Plan(ctx, st, net, taints, []gang.PodSet{trial}); err != nil {
			return false, err.Error()
		}
		return true, ""
	}
	all := set.Count / unit
	ok, reason := try(all)
	if ok {
		return set.Count, ""
	}
	// The pods of a set are alike and placed one after another: if k fit, fewer do.
	lo, hi := 0, all-1
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if fit, _ := try(mid); fit {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo * unit, reason
}

// networkOf is the network the nodes' labels describe, those labels and the nodes'
// taints, as the check reads them.
func networkOf(ctx context.Context, c client.Reader, keys topology.LabelKeys) (*topology.Network, map[string]map[string]string, gang.Taints, error) {
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return nil, nil, nil, err
	}
	labels := map[string]map[string]string{}
	taints := gang.Taints{}
	for _, n := range nodes.Items {
		if _, ok := n.Labels[keys.Rack]; ok {
			labels[n.Name] = n.Labels
			if len(n.Spec.Taints) > 0 {
				taints[n.Name] = n.Spec.Taints
			}
		}
	}
	net, err := topology.NetworkFromLabels(labels, keys)
	return net, labels, taints, err
}

// gpudraCheck names the Workload's admission check that gpudra controls ("" when none).
func gpudraCheck(ctx context.Context, c client.Reader, wl *kueue.Workload) (string, error) {
	for _, s := range wl.Status.AdmissionChecks {
		var ac kueue.AdmissionCheck
		if err := c.Get(ctx, types.NamespacedName{Name: string(s.Name)}, &ac); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return "", err
		}
		if ac.Spec.ControllerName == api.AdmissionCheckController {
			return string(s.Name), nil
		}
	}
	return "", nil
}

// terminatingPods counts pods with ResourceClaims whose deletion started less than
// terminatingWait before now.
func terminatingPods(ctx context.Context, c client.Reader, now time.Time) (int, error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods); err != nil {
		return 0, err
	}
	n := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil && len(p.Spec.ResourceClaims) > 0 && now.Sub(p.DeletionTimestamp.Time) < terminatingWait {
			n++
		}
	}
	return n, nil
}

func doNotSchedule(t *corev1.Taint) bool {
	return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
}

// KueueEventReason is, for a Workload Kueue reserved no quota for, the reason in the last
// Warning Kueue recorded on it (Pending: the quota it lacks; Inadmissible), as a
// QuotaReserved=False condition; nil when there is none or the events cannot be read. Kueue
// v0.19 can lose the Workload's condition to a concurrent status write of its own while the
// event stays.
func KueueEventReason(ctx context.Context, c kubernetes.Interface, wl *kueue.Workload) *Condition {
	events, err := c.CoreV1().Events(wl.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Workload,involvedObject.name=" + wl.Name, Limit: 100})
	if err != nil {
		return nil
	}
	var last *corev1.Event
	for i := range events.Items {
		e := &events.Items[i]
		if e.Type != corev1.EventTypeWarning || e.InvolvedObject.UID != wl.UID || (e.Reason != "Pending" && e.Reason != "Inadmissible") {
			continue
		}
		if last == nil || eventTime(e).After(eventTime(last)) {
			last = e
		}
	}
	if last == nil {
		return nil
	}
	return &Condition{Type: string(kueue.WorkloadQuotaReserved), Status: string(metav1.ConditionFalse),
		Reason: last.Reason + " (from Kueue's event)", Message: last.Message}
}

func eventTime(e *corev1.Event) time.Time {
	if !e.LastTimestamp.IsZero() {
		return e.LastTimestamp.Time
	}
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

package gang

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/locality"
	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// PodSet is a group of identical pods (a Kueue pod set).
type PodSet struct {
	Name  string
	Count int
	// Claims are the ResourceClaim specs each pod gets (from its ResourceClaimTemplates).
	Claims []resourceapi.ResourceClaimSpec
	// Required is the network level all pods of the set must share ("" = anywhere).
	Required string
	// SliceSize and SliceRequired split the set into consecutive slices of SliceSize pods
	// that must each share a SliceRequired domain (e.g. pipelines of 4 stages per rack).
	// SliceNetwork (tor or block), instead of SliceRequired, keeps each slice in one domain
	// of that level as a requirement where the domain's switch is oversubscribed and as a
	// preference where it is non-blocking.
	SliceSize     int
	SliceRequired string
	SliceNetwork  string
	// SubsliceSize, SubsliceRequired and SubsliceNetwork split each slice (or the whole set
	// without slices) the same way again, e.g. tensor-parallel groups of 4 pods per host
	// inside pipelines of 16 pods per ToR.
	SubsliceSize     int
	SubsliceRequired string
	SubsliceNetwork  string
	// NodeSelector is the pods' own node selector: only matching nodes are candidates.
	NodeSelector map[string]string
	// Tolerations are the pods' tolerations: nodes with a NoSchedule or NoExecute taint
	// none of them tolerates are not candidates.
	Tolerations []corev1.Toleration
	// Data are the datasets the pods read: among the domains the set fits in, planning
	// prefers the one where most pods run on nodes caching them (data.go).
	Data []locality.Need
}

// Validate checks a pod set, naming the annotation and the accepted values.
func (p PodSet) Validate() error {
	if p.Count < 1 {
		return fmt.Errorf("podSet %s: count %d: must be at least 1", p.Name, p.Count)
	}
	if p.Required != "" {
		if err := topology.ValidateLevel(p.Required); err != nil {
			return fmt.Errorf("podSet %s: annotation %s: %w", p.Name, api.AnnotationRequiredTopology, err)
		}
	}
	outer, outerName, outerLevel := p.Count, "the pod set's count", p.Required
	for _, u := range p.units() {
		if err := u.validate(outer, outerName, outerLevel); err != nil {
			return fmt.Errorf("podSet %s: %w", p.Name, err)
		}
		outer, outerName, outerLevel = u.size, fmt.Sprintf("%s %d", u.sizeKey, u.size), u.level()
	}
	return nil
}

// Placement is where every pod goes.
type Placement struct {
	// Nodes[podSet][i] is pod i's node.
	Nodes map[string][]string
	// Domains[podSet] is the domain at the pod set's required level ("" without one).
	Domains map[string]string
	// Allocations[podSet][i] are pod i's claims' allocations, in Claims order.
	Allocations map[string][][]resourceapi.AllocationResult
	// Notes[podSet] say where the set's datasets are cached (data.go) and, for slices
	// kept by the network rule, whether one domain was
	// required or preferred and why (e.g. "slices of 16 kept under one ToR (required:
	// b1/r1/tor-a uplinks oversubscribed 3:1)").
	Notes map[string][]string
}

// Unplaceable says why a gang does not fit now.
type Unplaceable struct{ Reason string }

func (u *Unplaceable) Error() string { return u.Reason }

// IsUnplaceable reports whether err means "does not fit now" (retry later) rather than
// bad input.
func IsUnplaceable(err error) bool {
	var u *Unplaceable
	return errors.As(err, &u)
}

// Plan places the whole gang or nothing, on nodes whose taints (by node name) the pod
// sets tolerate. st is not modified; on success the returned state has the gang's
// allocations committed.
func Plan(ctx context.Context, st *allocation.State, net *topology.Network, taints Taints, sets []PodSet) (*Placement, *allocation.State, error) {
	for _, s := range sets {
		if err := s.Validate(); err != nil {
			return nil, nil, err
		}
	}
	logger := klog.FromContext(ctx)
	work := st.Clone()
	out := &Placement{Nodes: map[string][]string{}, Domains: map[string]string{}, Allocations: map[string][][]resourceapi.AllocationResult{}, Notes: map[string][]string{}}
	for _, set := range sets {
		level := set.Required
		if level == "" {
			level = topology.LevelBlock
		}
		domains, err := net.Domains(level)
		if err != nil {
			return nil, nil, err
		}
		if set.Required == "" { // anywhere: one domain with every node
			domains = []topology.Domain{{Nodes: allNodes(domains)}}
		}
		var tried []string
		skipped := map[string]int{} // nodes left out by each untolerated taint, in all domains
		placed := false
		// Without data, the first domain the set fits in; with data, the one where most
		// pods read their datasets locally (the first among equals), stopping early when
		// every pod reads all of them locally.
		best, bestReads := -1, -1
		var bestState *allocation.State
		var bestRes setResult
		for i, d := range domains {
			nodes, left := candidates(logger, net, taints, set, d.Nodes)
			for t, n := range left {
				skipped[t] += n
			}
			trial := work.Clone()
			res, err := placeSet(ctx, trial, net, set, cachingFirst(net, set, nodes))
			if err != nil {
				return nil, nil, err
			}
			if res.nodes == nil {
				tried = append(tried, fmt.Sprintf("%s fits %d of %d", orCluster(d.Name), res.got, set.Count))
				continue
			}
			if reads := localReads(net, set, res.nodes); reads > bestReads {
				best, bestReads, bestState, bestRes = i, reads, trial, res
			}
			if bestReads == set.Count*len(set.Data) {
				break
			}
		}
		if best >= 0 {
			d, res := domains[best], bestRes
			work = bestState
			out.Nodes[set.Name], out.Allocations[set.Name], out.Domains[set.Name] = res.nodes, res.allocs, d.Name
			notes := res.notes(net, set)
			if len(set.Data) > 0 {
				notes = append(notes, dataNotes(net, set, d, res.nodes)...)
			}
			if len(notes) > 0 {
				out.Notes[set.Name] = notes
			}
			placed = true
		}
		if !placed {
			if never := neverFits(ctx, st, net, set); never != nil {
				return nil, nil, never
			}
			where := "the cluster"
			if set.Required != "" {
				where = "any single " + set.Required
			}
			reason := fmt.Sprintf("podSet %s (%d pods%s) does not fit in %s: %s",
				set.Name, set.Count, sliceText(set), where, strings.Join(tried, "; "))
			if rule := networkRule(net, set, allNodes(domains)); rule != "" {
				reason += "; " + rule
			}
			if len(skipped) > 0 {
				onlyTaints, err := fitsIgnoringTaints(ctx, logger, work, net, set, domains)
				if err != nil {
					return nil, nil, err
				}
				if onlyTaints {
					reason += "; only taints keep it out: it would fit if its pods tolerated " + taintText(skipped)
				} else {
					reason += "; nodes left out for taints its pods do not tolerate: " + taintText(skipped)
				}
			}
			return nil, nil, &Unplaceable{Reason: reason}
		}
	}
	return out, work, nil
}

// neverFits returns bad input when not even one pod of the set fits on any node of the
// network with nothing allocated and no taints: waiting would not help (a pod asking for
// more GPUs than any node has), so the workload is rejected rather than retried.
func neverFits(ctx context.Context, st *allocation.State, net *topology.Network, set PodSet) error {
	domains, err := net.Domains(topology.LevelBlock)
	if err != nil {
		return nil
	}
	nodes := allNodes(domains)
	node, _, err := placePod(ctx, st.Empty(), set, 0, nodes, nil)
	if err != nil || node != "" {
		return nil
	}
	return fmt.Errorf("podSet %s: one pod's claims do not fit on any of the %d nodes even with all their devices free: "+
		"it asks for more (or other) devices than a single node has", set.Name, len(nodes))
}

// fitsIgnoringTaints reports whether the pod set would fit in one of the domains if no
// node were tainted, so that a reason can tell taints apart from a lack of devices.
func fitsIgnoringTaints(ctx context.Context, logger klog.Logger, st *allocation.State, net *topology.Network, set PodSet, domains []topology.Domain) (bool, error) {
	for _, d := range domains {
		nodes, _ := candidates(logger, net, nil, set, d.Nodes)
		res, err := placeSet(ctx, st.Clone(), net, set, nodes)
		if err != nil || res.nodes != nil {
			return res.nodes != nil, err
		}
	}
	return false, nil
}

func orCluster(name string) string {
	if name == "" {
		return "the cluster"
	}
	return name
}

func sliceText(s PodSet) string {
	var out string
	for _, u := range s.units() {
		out += fmt.Sprintf(", %s of %d per %s", u.plural, u.size, u.level())
		if u.network != "" {
			out += " (by its oversubscription)"
		}
	}
	return out
}

func allNodes(domains []topology.Domain) []string {
	var out []string
	for _, d := range domains {
		out = append(out, d.Nodes...)
	}
	sort.Strings(out)
	return out
}

// placePod puts one pod's claims on the first node that takes them all, committing them.
// Nodes in full are skipped; nodes the claims do not fit on are added to it (full may be nil).
func placePod(ctx context.Context, st *allocation.State, set PodSet, pod int, nodes []string, full map[string]bool) (string, []resourceapi.AllocationResult, error) {
	claims := make([]*resourceapi.ResourceClaim, len(set.Claims))
	for k, spec := range set.Claims {
		c := &resourceapi.ResourceClaim{Spec: *spec.DeepCopy()}
		c.Namespace = "gang"
		c.Name = fmt.Sprintf("%s-%d-%d", set.Name, pod, k)
		c.UID = types.UID(c.Name)
		claims[k] = c
	}
	skipExhausted := skipExhaustedNodes && needsFreeDevice(set.Claims)
	for _, n := range nodes {
		if full[n] {
			continue
		}
		if skipExhausted && st.Exhausted(n) {
			if full != nil {
				full[n] = true
			}
			continue
		}
		res, err := st.AllocateAndCommit(ctx, n, claims...)
		if errors.Is(err, allocation.ErrUnsatisfiable) {
			if full != nil {
				full[n] = true
			}
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("podSet %s: %w", set.Name, err)
		}
		return n, res, nil
	}
	return "", nil, nil
}

// skipExhaustedNodes: nodes with no device left are passed over without the allocator
// (off only to measure what it saves, BenchmarkPlanRackGang640).
var skipExhaustedNodes = true

// needsFreeDevice: every claim asks for at least one device and none with admin access
// (which may use allocated devices), so a node with no device left cannot take the pod.
func needsFreeDevice(claims []resourceapi.ResourceClaimSpec) bool {
	if len(claims) == 0 {
		return false
	}
	for _, c := range claims {
		if len(c.Devices.Requests) == 0 {
			return false
		}
		for _, r := range c.Devices.Requests {
			if r.Exactly != nil && r.Exactly.AdminAccess != nil && *r.Exactly.AdminAccess {
				return false
			}
		}
	}
	return true
}

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
	"github.com/gpudra/gpudra/topology"
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
	SliceSize     int
	SliceRequired string
	// NodeSelector is the pods' own node selector: only matching nodes are candidates.
	NodeSelector map[string]string
	// Tolerations are the pods' tolerations: nodes with a NoSchedule or NoExecute taint
	// none of them tolerates are not candidates.
	Tolerations []corev1.Toleration
}

// Validate checks a pod set, naming the field and the accepted values.
func (p PodSet) Validate() error {
	if p.Count < 1 {
		return fmt.Errorf("podSet %s: count %d: must be at least 1", p.Name, p.Count)
	}
	if p.Required != "" {
		if err := topology.ValidateLevel(p.Required); err != nil {
			return fmt.Errorf("podSet %s: required: %w", p.Name, err)
		}
	}
	if p.SliceSize > 0 || p.SliceRequired != "" {
		if err := topology.ValidateLevel(p.SliceRequired); err != nil {
			return fmt.Errorf("podSet %s: sliceRequired: %w", p.Name, err)
		}
		if p.SliceSize < 1 || p.Count%p.SliceSize != 0 {
			return fmt.Errorf("podSet %s: sliceSize %d must divide count %d", p.Name, p.SliceSize, p.Count)
		}
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
	out := &Placement{Nodes: map[string][]string{}, Domains: map[string]string{}, Allocations: map[string][][]resourceapi.AllocationResult{}}
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
		for _, d := range domains {
			nodes, left := candidates(logger, net, taints, set, d.Nodes)
			for t, n := range left {
				skipped[t] += n
			}
			trial := work.Clone()
			podNodes, allocs, got, err := placeSet(ctx, trial, net, set, nodes)
			if err != nil {
				return nil, nil, err
			}
			if podNodes == nil {
				tried = append(tried, fmt.Sprintf("%s fits %d of %d", orCluster(d.Name), got, set.Count))
				continue
			}
			work = trial
			out.Nodes[set.Name], out.Allocations[set.Name], out.Domains[set.Name] = podNodes, allocs, d.Name
			placed = true
			break
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
		podNodes, _, _, err := placeSet(ctx, st.Clone(), net, set, nodes)
		if err != nil || podNodes != nil {
			return podNodes != nil, err
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
	if s.SliceSize == 0 {
		return ""
	}
	return fmt.Sprintf(", slices of %d per %s", s.SliceSize, s.SliceRequired)
}

func allNodes(domains []topology.Domain) []string {
	var out []string
	for _, d := range domains {
		out = append(out, d.Nodes...)
	}
	sort.Strings(out)
	return out
}

// placeSet places one pod set on the given candidate nodes (slice by slice when sliced).
// It returns nil nodes and how many pods fitted when the set does not fit; err only for
// bad input.
func placeSet(ctx context.Context, st *allocation.State, net *topology.Network, set PodSet, nodes []string) ([]string, [][]resourceapi.AllocationResult, int, error) {
	groups := [][]string{nodes}
	size := set.Count
	if set.SliceSize > 0 {
		size = set.SliceSize
		sub := map[string][]string{}
		var names []string
		for _, n := range nodes {
			d := net.DomainOf(n, set.SliceRequired)
			if sub[d] == nil {
				names = append(names, d)
			}
			sub[d] = append(sub[d], n)
		}
		sort.Strings(names)
		groups = groups[:0]
		for _, name := range names {
			groups = append(groups, sub[name])
		}
	}
	var outNodes []string
	var outAllocs [][]resourceapi.AllocationResult
	for slice := 0; slice < set.Count/size; slice++ {
		placed := false
		best := 0 // most pods of this slice any group took, for the reason
		for _, g := range groups {
			trial := st.Clone()
			// The pods of a set ask for the same claims and each one only adds allocations,
			// so a node one pod did not fit on will not take a later one either.
			full := map[string]bool{}
			var sliceNodes []string
			var sliceAllocs [][]resourceapi.AllocationResult
			for i := range size {
				pod := slice*size + i
				node, allocs, err := placePod(ctx, trial, set, pod, g, full)
				if err != nil {
					return nil, nil, 0, err
				}
				if node == "" {
					break
				}
				sliceNodes = append(sliceNodes, node)
				sliceAllocs = append(sliceAllocs, allocs)
			}
			best = max(best, len(sliceNodes))
			if len(sliceNodes) == size {
				*st = *trial
				outNodes = append(outNodes, sliceNodes...)
				outAllocs = append(outAllocs, sliceAllocs...)
				placed = true
				break
			}
		}
		if !placed {
			return nil, nil, len(outNodes) + best, nil
		}
	}
	return outNodes, outAllocs, len(outNodes), nil
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

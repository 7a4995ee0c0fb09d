package gang

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// unit is one level of a pod set's split into consecutive groups of pods that share a
// domain: slices, and subslices inside them.
type unit struct {
	size int
	// required: every group inside one domain of this level; network (tor or block): inside
	// one domain where its switch is oversubscribed, preferably where it is not.
	required, network string
	// what the user wrote, for messages.
	plural, sizeKey, requiredKey, networkKey string
}

func (u unit) level() string {
	if u.network != "" {
		return u.network
	}
	return u.required
}

// units lists the set's levels of slices, outermost first.
func (p PodSet) units() []unit {
	var out []unit
	if p.SliceSize != 0 || p.SliceRequired != "" || p.SliceNetwork != "" {
		out = append(out, unit{size: p.SliceSize, required: p.SliceRequired, network: p.SliceNetwork, plural: "slices",
			sizeKey: api.AnnotationSliceSize, requiredKey: api.AnnotationSliceTopology, networkKey: api.AnnotationSliceNetworkTopology})
	}
	if p.SubsliceSize != 0 || p.SubsliceRequired != "" || p.SubsliceNetwork != "" {
		out = append(out, unit{size: p.SubsliceSize, required: p.SubsliceRequired, network: p.SubsliceNetwork, plural: "subslices",
			sizeKey: api.AnnotationSubsliceSize, requiredKey: api.AnnotationSubsliceTopology, networkKey: api.AnnotationSubsliceNetworkTopology})
	}
	return out
}

// validate checks one level of slices against the group it splits (outer pods, described
// by outerName, kept in outerLevel, "" for none).
func (u unit) validate(outer int, outerName, outerLevel string) error {
	switch {
	case u.required == "" && u.network == "":
		return fmt.Errorf("annotation %s needs %s (%s) or %s (%s)", u.sizeKey,
			u.requiredKey, strings.Join(topology.Levels, ", "), u.networkKey, strings.Join(topology.SwitchLevels, ", "))
	case u.required != "" && u.network != "":
		return fmt.Errorf("annotations %s and %s: set one of them, not both", u.requiredKey, u.networkKey)
	case u.required != "":
		if err := topology.ValidateLevel(u.required); err != nil {
			return fmt.Errorf("annotation %s: %w", u.requiredKey, err)
		}
	case !slices.Contains(topology.SwitchLevels, u.network):
		return fmt.Errorf("annotation %s %q: accepted values are %s (the levels whose switches have uplinks)",
			u.networkKey, u.network, strings.Join(topology.SwitchLevels, ", "))
	}
	if u.size == 0 {
		return fmt.Errorf("annotation %s needs %s, an integer of at least 1", u.keyOfLevel(), u.sizeKey)
	}
	if u.size < 1 {
		return fmt.Errorf("annotation %s %d: must be at least 1", u.sizeKey, u.size)
	}
	if outer%u.size != 0 {
		return fmt.Errorf("annotation %s %d: must divide %s (%d)", u.sizeKey, u.size, outerName, outer)
	}
	if outerLevel != "" && depth(u.level()) < depth(outerLevel) {
		return fmt.Errorf("annotation %s: %s is wider than the %s that holds it: use %s or a narrower level",
			u.keyOfLevel(), u.level(), outerLevel, outerLevel)
	}
	return nil
}

func (u unit) keyOfLevel() string {
	if u.network != "" {
		return u.networkKey
	}
	return u.requiredKey
}

// depth orders levels, outermost first.
func depth(level string) int { return slices.Index(topology.Levels, level) }

// group is a set of candidate nodes a unit may be placed on: one domain, or several
// non-blocking ones.
type group struct {
	domains []string
	nodes   []string
}

// groupsAt splits nodes by their domain at a level, by domain name.
func groupsAt(net *topology.Network, nodes []string, level string) []group {
	sub := map[string][]string{}
	var names []string
	for _, n := range nodes {
		d := net.DomainOf(n, level)
		if sub[d] == nil {
			names = append(names, d)
		}
		sub[d] = append(sub[d], n)
	}
	sort.Strings(names)
	out := make([]group, 0, len(names))
	for _, name := range names {
		out = append(out, group{domains: []string{name}, nodes: sub[name]})
	}
	return out
}

// setResult is a pod set's placement on some nodes.
type setResult struct {
	// nodes and allocs per pod; nodes is nil when the set does not fit.
	nodes  []string
	allocs [][]resourceapi.AllocationResult
	// got is how many pods fitted.
	got int
	// kept[level of units] lists, for units placed by the network rule, the domains each
	// unit landed in (one, or several non-blocking ones).
	kept map[int][][]string
}

// placeSet places one pod set on the given candidate nodes, slice by slice and subslice by
// subslice. It returns nil nodes and how many pods fitted when the set does not fit; err
// only for bad input.
func placeSet(ctx context.Context, st *allocation.State, net *topology.Network, set PodSet, nodes []string) (setResult, error) {
	res := setResult{kept: map[int][][]string{}}
	ok, err := placeUnits(ctx, st, net, set, set.units(), 0, 0, set.Count, nodes, &res)
	if !ok || err != nil {
		res.nodes, res.allocs = nil, nil
	}
	return res, err
}

// placeUnits places pods first..first+count-1 on nodes, in units[0] groups (each inside one
// of the nodes' domains at its level), each group split by the rest of units. It appends
// to res and commits to st what it placed; it reports whether all pods fitted. When they
// did not, what stays committed to st is exactly res.allocs (the caller releases it).
func placeUnits(ctx context.Context, st *allocation.State, net *topology.Network, set PodSet, units []unit, lvl, first, count int, nodes []string, res *setResult) (bool, error) {
	if len(units) == 0 {
		// The pods of a set ask for the same claims and each one only adds allocations, so
		// a node one pod did not fit on will not take a later one either.
		full := map[string]bool{}
		for pod := first; pod < first+count; pod++ {
			node, allocs, err := placePod(ctx, st, set, pod, nodes, full)
			if err != nil || node == "" {
				return false, err
			}
			res.nodes = append(res.nodes, node)
			res.allocs = append(res.allocs, allocs)
			res.got++
		}
		return true, nil
	}
	u := units[0]
	groups := groupsAt(net, nodes, u.level())
	if u.network != "" {
		// Where no single domain takes a unit, it may span the non-blocking ones.
		var open group
		for _, g := range groups {
			if net.Oversubscription(g.nodes[0], u.network) <= 1 {
				open.domains = append(open.domains, g.domains...)
				open.nodes = append(open.nodes, g.nodes...)
			}
		}
		if len(open.domains) > 1 {
			sort.Strings(open.nodes)
			groups = append(groups, open)
		}
	}
	for k := 0; k < count/u.size; k++ {
		best := 0 // most pods of this unit any group took, for the reason
		placed := false
		for _, g := range groups {
			// A trial commits to st and, when it fails, releases what it committed: a
			// copy of the cluster's allocations per trial made a gang's planning grow
			// with its units times the allocated devices.
			sub := setResult{kept: map[int][][]string{}}
			ok, err := placeUnits(ctx, st, net, set, units[1:], lvl+1, first+k*u.size, u.size, g.nodes, &sub)
			if err != nil {
				return false, err
			}
			best = max(best, sub.got)
			if !ok {
				for _, allocs := range sub.allocs {
					for j := range allocs {
						st.Release(&allocs[j])
					}
				}
				continue
			}
			res.nodes = append(res.nodes, sub.nodes...)
			res.allocs = append(res.allocs, sub.allocs...)
			res.got += sub.got
			for d, kept := range sub.kept {
				res.kept[d] = append(res.kept[d], kept...)
			}
			if u.network != "" {
				res.kept[lvl] = append(res.kept[lvl], usedDomains(net, sub.nodes, u.network))
			}
			placed = true
			break
		}
		if !placed {
			res.got += best
			return false, nil
		}
	}
	return true, nil
}

// usedDomains are the distinct domains at a level the nodes are in, sorted.
func usedDomains(net *topology.Network, nodes []string, level string) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, net.DomainOf(n, level))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// notes say, per level of units placed by the network rule, which rule kept them where
// they are: "slices of 16 kept under one ToR (required: b1/r1/tor-a uplinks oversubscribed
// 3:1)", and which units span non-blocking domains.
func (r setResult) notes(net *topology.Network, set PodSet) []string {
	var out []string
	for d, u := range set.units() {
		if u.network == "" || len(r.kept[d]) == 0 {
			continue
		}
		var required, preferred, spans []string
		seen := map[string]bool{}
		for k, domains := range r.kept[d] {
			if len(domains) > 1 {
				spans = append(spans, fmt.Sprintf("%s %d spans %s", strings.TrimSuffix(u.plural, "s"), k, strings.Join(domains, ", ")))
				continue
			}
			dom := domains[0]
			if seen[dom] {
				continue
			}
			seen[dom] = true
			if ratio := domainOversubscription(net, dom, u.network); ratio > 1 {
				required = append(required, fmt.Sprintf("%s uplinks oversubscribed %s", dom, topology.FormatOversubscription(ratio)))
			} else {
				preferred = append(preferred, dom+" non-blocking")
			}
		}
		where := levelName(u.network)
		var why []string
		if len(required) > 0 {
			why = append(why, "required: "+strings.Join(required, ", "))
		}
		if len(preferred) > 0 {
			why = append(why, "preferred: "+strings.Join(preferred, ", "))
		}
		if len(why) > 0 {
			out = append(out, fmt.Sprintf("%s of %d kept under one %s (%s)", u.plural, u.size, where, strings.Join(why, "; ")))
		}
		if len(spans) > 0 {
			out = append(out, fmt.Sprintf("%s: one %s only preferred, their %ss are non-blocking", strings.Join(spans, "; "), where, where))
		}
	}
	return out
}

// domainOversubscription is the oversubscription of a domain's switch, read from one of
// its nodes.
func domainOversubscription(net *topology.Network, domain, level string) float64 {
	domains, err := net.Domains(level)
	if err != nil {
		return 0
	}
	for _, d := range domains {
		if d.Name == domain && len(d.Nodes) > 0 {
			return net.Oversubscription(d.Nodes[0], level)
		}
	}
	return 0
}

// networkRule says, for a set that did not fit, which domains its network-kept units may
// not span: "slices must each stay under one ToR where its uplinks are oversubscribed:
// b1/r1/tor-a 3:1, b1/r1/tor-b 3:1".
func networkRule(net *topology.Network, set PodSet, nodes []string) string {
	var out []string
	for _, u := range set.units() {
		if u.network == "" {
			continue
		}
		var over []string
		for _, g := range groupsAt(net, nodes, u.network) {
			if r := net.Oversubscription(g.nodes[0], u.network); r > 1 {
				over = append(over, g.domains[0]+" "+topology.FormatOversubscription(r))
			}
		}
		where := levelName(u.network)
		if len(over) == 0 {
			out = append(out, fmt.Sprintf("%s may span %ss (all non-blocking)", u.plural, where))
			continue
		}
		out = append(out, fmt.Sprintf("%s must each stay under one %s where its uplinks are oversubscribed: %s",
			u.plural, where, strings.Join(over, ", ")))
	}
	return strings.Join(out, "; ")
}

// levelName is how messages name a switch level.
func levelName(level string) string {
	if level == topology.LevelToR {
		return "ToR"
	}
	return level
}

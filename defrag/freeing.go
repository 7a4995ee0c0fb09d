package defrag

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// freeing picks, greedily, the units to evict so that the node has need whole GPUs free:
// each step frees the GPU that costs the fewest more evicted pods (lowest index on ties).
// chosen are units already evicted. It returns the new units (nil and the reason when the
// node cannot get there within the bounds).
func (p *planner) freeing(pr *projection, node string, need int, chosen map[*unit]bool) ([]*unit, string) {
	gs := pr.v.nodes[node]
	holders := make([][]*unit, len(gs))
	claimsOn := make([]int, len(gs)) // allocations on each GPU that units hold
	for _, u := range p.byNode[node] {
		for _, rp := range u.pods {
			if rp.node != node {
				continue
			}
			for _, cl := range rp.claims {
				for _, r := range cl.Status.Allocation.Devices.Results {
					d, ok := pr.v.devices[structuredID(r)]
					if !ok || d.node != node {
						continue
					}
					for _, i := range d.gpus {
						if i >= 0 && i < len(gs) {
							claimsOn[i]++
							if !slices.Contains(holders[i], u) {
								holders[i] = append(holders[i], u)
							}
						}
					}
				}
			}
		}
	}
	taken := maps.Clone(chosen)
	if taken == nil {
		taken = map[*unit]bool{}
	}
	freed := func(i int) bool {
		g := &gs[i]
		if g.held == 0 && g.shareMilli == 0 {
			return true
		}
		if len(holders[i]) == 0 || p.occupied(node, i) > claimsOn[i] {
			return false // held by claims of no running pod we know
		}
		for _, u := range holders[i] {
			if !taken[u] {
				return false
			}
		}
		return true
	}
	var blocked []string
	movable := func(i int) bool {
		if len(holders[i]) == 0 || p.occupied(node, i) > claimsOn[i] {
			return false
		}
		for _, u := range holders[i] {
			if u.why != "" {
				if !slices.Contains(blocked, u.why) {
					blocked = append(blocked, u.why)
				}
				return false
			}
		}
		return true
	}
	var added []*unit
	for {
		free := 0
		for i := range gs {
			if freed(i) {
				free++
			}
		}
		if free >= need {
			break
		}
		best, bestCost := -1, 0
		for i := range gs {
			if freed(i) || !movable(i) {
				continue
			}
			cost := 0
			for _, u := range holders[i] {
				if !taken[u] {
					cost += len(u.pods)
				}
			}
			if best < 0 || cost < bestCost {
				best, bestCost = i, cost
			}
		}
		if best < 0 {
			reason := fmt.Sprintf("only %d GPUs can come free", free)
			if len(blocked) > 0 {
				reason += " (" + strings.Join(blocked, "; ") + ")"
			}
			return nil, reason
		}
		for _, u := range holders[best] {
			if !taken[u] {
				taken[u] = true
				added = append(added, u)
			}
		}
	}
	all := slices.Collect(maps.Keys(taken))
	if n := countPods(all); n > p.max {
		return nil, fmt.Sprintf("freeing %d GPUs evicts %d pods, more than %d", need, n, p.max)
	}
	if why := p.overBudget(all); why != "" {
		return nil, why
	}
	slices.SortFunc(added, func(a, b *unit) int { return strings.Compare(a.name, b.name) })
	return added, ""
}

// overBudget says which PodDisruptionBudget the units together would break ("" if none).
func (p *planner) overBudget(units []*unit) string {
	use := map[types.NamespacedName]int{}
	for _, u := range units {
		for k, n := range u.pdbs {
			use[k] += n
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(use), func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) }) {
		if use[k] > p.budgets[k] {
			return fmt.Sprintf("PodDisruptionBudget %s allows %d disruptions, the moves take %d", k, p.budgets[k], use[k])
		}
	}
	return ""
}

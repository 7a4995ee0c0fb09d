package defrag

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/gpudra/gpudra/queueing/gang"
	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// unlabelledRack is the rack of nodes without the rack label: one domain for them all.
const unlabelledRack = "unlabelled"

// forWorkload makes room for a pending gang: while the gang does not fit (planned as the
// admission check plans it) with every evicted pod placed again, it adds the node that is
// cheapest to free as many GPUs as one of the gang's pods needs.
func (p *planner) forWorkload(ctx context.Context, wl *Workload, res *Result) error {
	net, taints, err := p.network()
	if err != nil {
		return err
	}
	place := func(ctx context.Context, pr *projection) error {
		plan, st, err := gang.Plan(ctx, pr.st, net, taints, wl.PodSets)
		if gang.IsUnplaceable(err) {
			return &nowhereError{fmt.Errorf("workload %s: %w", wl.Name, err)}
		}
		if err != nil {
			return fmt.Errorf("workload %s: %w", wl.Name, err)
		}
		pr.st = st
		for _, pods := range plan.Allocations {
			for _, results := range pods {
				for k := range results {
					pr.v.apply(&results[k], 1)
				}
			}
		}
		return nil
	}
	need := gpusPerPod(wl)
	chosen := map[*unit]bool{}
	var order []*unit
	targets := map[string]bool{}
	var why []string
	for {
		after, moves, err := p.simulate(ctx, order, place)
		var nowhere *nowhereError
		switch {
		case err == nil:
			res.Found, res.Moves, res.Evictions = true, moves, countPods(order)
			r := after.report(p.typical)
			res.After = &r
			return nil
		case errors.As(err, &nowhere):
			if len(order) > 0 {
				why = append(why, fmt.Sprintf("moving %s: %v", moveNames(order), err))
			} else {
				why = append(why, err.Error())
			}
		default:
			return err
		}
		var best *candidate
		for _, node := range p.base.v.nodeNames() {
			if targets[node] {
				continue
			}
			units, _ := p.freeing(p.base, node, min(need, len(p.base.v.nodes[node])), chosen)
			if units == nil {
				continue
			}
			if c := (candidate{node: node, units: units, pods: countPods(units)}); c.pods > 0 && (best == nil || c.pods < best.pods) {
				best = &c
			}
		}
		if best == nil {
			res.Reason = fmt.Sprintf("no plan within %d evictions: %s", p.max, firstReasons(why))
			return nil
		}
		targets[best.node] = true
		for _, u := range best.units {
			chosen[u] = true
			order = append(order, u)
		}
	}
}

// gpusPerPod is the most GPUs one pod of the workload asks for (at least 1).
func gpusPerPod(wl *Workload) int {
	most := 1
	for _, set := range wl.PodSets {
		n := 0
		for _, c := range set.Claims {
			for _, r := range c.Devices.Requests {
				gpus, ok := 0, false
				if r.Exactly != nil {
					gpus, ok = api.ClassGPUs(r.Exactly.DeviceClassName)
				}
				if !ok {
					n++ // a share, a MIG device or a request of another kind: one GPU's room at most
					continue
				}
				n += gpus * int(max(r.Exactly.Count, 1))
			}
		}
		most = max(most, n)
	}
	return most
}

// network places the GPU nodes in the network by their labels (nodes without the rack
// label share one rack) and reads their taints.
func (p *planner) network() (*topology.Network, gang.Taints, error) {
	labels := map[string]map[string]string{}
	taints := gang.Taints{}
	for k := range p.cluster.Nodes {
		n := &p.cluster.Nodes[k]
		l := maps.Clone(n.Labels)
		if l == nil {
			l = map[string]string{}
		}
		if l[p.labels.Rack] == "" {
			l[p.labels.Rack] = unlabelledRack
		}
		l[topology.LabelHostname] = n.Name
		labels[n.Name] = l
		if len(n.Spec.Taints) > 0 {
			taints[n.Name] = n.Spec.Taints
		}
	}
	for _, node := range p.base.v.nodeNames() {
		if labels[node] == nil {
			labels[node] = map[string]string{p.labels.Rack: unlabelledRack, topology.LabelHostname: node}
		}
	}
	net, err := topology.NetworkFromLabels(labels, p.labels)
	return net, taints, err
}

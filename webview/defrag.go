package webview

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/gpudra/gpudra/defrag"
)

// defragMaxAge is how long one measurement and plan serves every request: at most one plan
// per this interval, however often the cluster changes or the page is asked for.
const defragMaxAge = 10 * time.Second

// DefragPage is the defragmentation page's data: the planner's report of the cluster's GPUs
// and each node's part of it (only for a caller who may list ResourceSlices and
// ResourceClaims everywhere, what it is measured from), and the plan that would free one
// whole node, its moves those of pods the caller may list (read-only: nothing is moved).
type DefragPage struct {
	// List pages the nodes (100 a page; ?node= keeps those whose name contains the text).
	List   Listing
	Report *defrag.Report
	Nodes  []defrag.NodeReport
	Plan   *DefragPlan
	// Measured is when the report and plan were made (UTC).
	Measured string
	Error    string
}

// DefragPlan is the plan to free one whole node.
type DefragPlan struct {
	Found bool
	// Target is the node it frees (empty without a plan, or for a caller who may not see
	// the report).
	Target string
	// Reason says why there is no plan.
	Reason string
	// Evictions counts every pod the plan evicts, Moves those the caller may list, and
	// HiddenPods the others.
	Evictions  int
	Moves      []DefragMove
	HiddenPods int
}

// DefragMove is one pod the plan evicts, the node it runs on and the node and devices the
// allocator places it on again.
type DefragMove struct {
	Pod      Ref
	From, To string
	Devices  []string
}

// defragResult is one measurement and plan of the whole cache.
type defragResult struct {
	at      time.Time
	version uint64
	report  defrag.Report
	nodes   []defrag.NodeReport
	plan    *defrag.Result
}

// defragPlan measures the cache and plans to free one node, once per change of the cache
// and at most once per defragMaxAge; requests in between share the result.
func (s *Server) defragPlan(ctx context.Context) (*defragResult, error) {
	s.defragMu.Lock()
	defer s.defragMu.Unlock()
	s.mu.Lock()
	v := s.version
	s.mu.Unlock()
	if d := s.defrag; d != nil && (d.version == v || time.Since(d.at) < defragMaxAge) {
		return d, nil
	}
	c, err := s.defragCluster(ctx)
	if err != nil {
		return nil, err
	}
	report, nodes := defrag.Measure(c, defrag.Options{Labels: s.labels})
	plan, err := defrag.Plan(ctx, c, defrag.Goal{FreeNode: true}, defrag.Options{Labels: s.labels})
	if err != nil {
		return nil, err
	}
	s.defrag = &defragResult{at: time.Now(), version: v, report: report, nodes: nodes, plan: plan}
	return s.defrag, nil
}

// defragCluster is the cache as the planner reads it. PodDisruptionBudgets are not read.
func (s *Server) defragCluster(ctx context.Context) (*defrag.Cluster, error) {
	var c defrag.Cluster
	var err error
	if c.Classes, err = values(s.src.classes(ctx)); err != nil {
		return nil, err
	}
	if c.Slices, err = values(s.src.slices(ctx)); err != nil {
		return nil, err
	}
	if c.Claims, err = values(s.src.claims(ctx)); err != nil {
		return nil, err
	}
	if c.Pods, err = values(s.src.pods(ctx)); err != nil {
		return nil, err
	}
	if c.Nodes, err = values(s.src.nodes(ctx)); err != nil {
		return nil, err
	}
	return &c, nil
}

func (s *Server) defragPage(r *http.Request, sc *scope) (string, string, any, int) {
	const title = "Defragmentation"
	l, err := parseListing(r)
	if err != nil {
		return title, "defrag", DefragPage{List: l, Error: err.Error()}, http.StatusBadRequest
	}
	d, err := s.defragPlan(r.Context())
	if err != nil {
		return title, "defrag", DefragPage{List: l, Error: err.Error()}, http.StatusInternalServerError
	}
	p := DefragPage{List: l, Measured: d.at.UTC().Format("15:04:05"), Plan: &DefragPlan{Found: d.plan.Found, Evictions: d.plan.Evictions}}
	// Why no plan was found may name any namespace's pods.
	if sc.can(podsResource, "") {
		p.Plan.Reason = d.plan.Reason
	} else if !d.plan.Found {
		p.Plan.Reason = "no plan within the bound on evictions (the reason names pods you may not list)"
	}
	// The report is measured from every claim: only for a caller who may read them all.
	if sc.canCluster(slicesResource) && sc.canCluster(claimsResource) {
		report := d.report
		p.Report, p.Plan.Target = &report, d.plan.Target
		var nodes []defrag.NodeReport
		for _, n := range d.nodes {
			if matches(l.Node, n.Node) {
				nodes = append(nodes, n)
			}
		}
		p.Nodes = paginate(&p.List, nodes)
	}
	for _, m := range d.plan.Moves {
		for _, pm := range m.Pods {
			ns, name, _ := strings.Cut(pm.Pod, "/")
			if !sc.can(podsResource, ns) {
				p.Plan.HiddenPods++
				continue
			}
			p.Plan.Moves = append(p.Plan.Moves, DefragMove{Pod: Ref{Namespace: ns, Name: name}, From: pm.From, To: pm.To, Devices: pm.Devices})
		}
	}
	return title, "defrag", p, http.StatusOK
}

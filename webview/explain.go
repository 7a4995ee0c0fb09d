package webview

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/driver/allocation"
)

// RequestView is one request of a claim.
type RequestView struct {
	Name, Class, Count, Selectors, Capacity string
}

// ResultView is one allocated device.
type ResultView struct {
	Request, Driver, Pool, Device, Node, Consumed string
}

// ClaimView is a claim with what gpudra explain says about it.
type ClaimView struct {
	Namespace, Name string
	Found           bool
	Requests        []RequestView
	Allocated       bool
	NodeSelector    string
	Results         []ResultView
	ReservedFor     []Ref
	// FitsOn counts the nodes a pending claim fits on now; Nodes are every node with
	// devices, fitting nodes first, then the closest.
	FitsOn int
	Nodes  []allocation.NodeDiagnosis
	Error  string
}

// PodView is a pod and the nodes kube-scheduler's filters rule out before devices.
type PodView struct {
	Namespace, Name, Phase, Node string
	Nodes                        int
	RuledOut                     []allocation.NodeDiagnosis
}

// Explain is the claim and pod page.
type Explain struct {
	Kind, Namespace, Name string
	Pod                   *PodView
	Claims                []ClaimView
	Error                 string
}

// state builds the allocator's view of the cluster from the cached objects the caller
// may read, as allocation.FromCluster does from lists.
func (s *Server) state(sc *scope) (*allocation.State, allocation.Holders, []*resourceapi.ResourceClaim, error) {
	var classes []*resourceapi.DeviceClass
	var sl []*resourceapi.ResourceSlice
	var err error
	if sc.canCluster(classesResource) {
		if classes, err = s.src.classes(sc.ctx); err != nil {
			return nil, nil, nil, err
		}
	}
	if sc.canCluster(slicesResource) {
		if sl, err = s.src.slices(sc.ctx); err != nil {
			return nil, nil, nil, err
		}
	}
	claims, err := s.visibleClaims(sc)
	if err != nil {
		return nil, nil, nil, err
	}
	if sc.err != nil {
		return nil, nil, nil, sc.err
	}
	st := allocation.New(classes, sl)
	holders := allocation.Holders{}
	for _, cl := range claims {
		if a := cl.Status.Allocation; a != nil {
			st.Commit(a)
			holders.AddHolder(cl.Namespace+"/"+cl.Name, a)
		}
	}
	return st, holders, claims, nil
}

func (s *Server) explainClaim(sc *scope, ns, name string) Explain {
	e := Explain{Kind: "claim", Namespace: ns, Name: name}
	st, holders, claims, err := s.state(sc)
	if err != nil {
		e.Error = err.Error()
		return e
	}
	e.Claims = []ClaimView{s.claimView(sc, st, holders, claims, ns, name, nil)}
	return e
}

func (s *Server) explainPod(sc *scope, ns, name string) Explain {
	e := Explain{Kind: "pod", Namespace: ns, Name: name}
	pods, err := s.visiblePods(sc)
	if err == nil && sc.err != nil {
		err = sc.err
	}
	if err != nil {
		e.Error = err.Error()
		return e
	}
	var pod *corev1.Pod
	for _, p := range pods {
		if p.Namespace == ns && p.Name == name {
			pod = p
		}
	}
	if pod == nil {
		e.Error = fmt.Sprintf("pod %s/%s not found", ns, name)
		return e
	}
	st, holders, claims, err := s.state(sc)
	if err != nil {
		e.Error = err.Error()
		return e
	}
	pv := &PodView{Namespace: ns, Name: name, Phase: string(pod.Status.Phase), Node: pod.Spec.NodeName}
	e.Pod = pv
	var nodes []*corev1.Node
	if sc.canCluster(nodesResource) {
		if nodes, err = s.src.nodes(sc.ctx); err != nil {
			e.Error = err.Error()
			return e
		}
	}
	onNode := map[string][]*corev1.Pod{}
	for _, p := range pods {
		if p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			onNode[p.Spec.NodeName] = append(onNode[p.Spec.NodeName], p)
		}
	}
	logger := klog.FromContext(sc.ctx)
	ruledOut := map[string]string{}
	pv.Nodes = len(nodes)
	for _, n := range nodes {
		if why := st.NodeFilter(logger, pod, n, onNode[n.Name]); why != "" {
			ruledOut[n.Name] = why
			pv.RuledOut = append(pv.RuledOut, allocation.NodeDiagnosis{Node: n.Name, RuledOut: why})
		}
	}
	slices.SortFunc(pv.RuledOut, func(a, b allocation.NodeDiagnosis) int { return cmp.Compare(a.Node, b.Node) })
	names := podClaimNames(pod)
	if len(names) == 0 {
		e.Error = fmt.Sprintf("pod %s/%s has no ResourceClaims yet (claims from templates appear once the resourceclaim controller creates them)", ns, name)
		return e
	}
	for _, n := range names {
		e.Claims = append(e.Claims, s.claimView(sc, st, holders, claims, ns, n, ruledOut))
	}
	return e
}

func (s *Server) claimView(sc *scope, st *allocation.State, holders allocation.Holders, claims []*resourceapi.ResourceClaim, ns, name string, ruledOut map[string]string) ClaimView {
	v := ClaimView{Namespace: ns, Name: name}
	var cl *resourceapi.ResourceClaim
	for _, c := range claims {
		if c.Namespace == ns && c.Name == name {
			cl = c
		}
	}
	if cl == nil {
		v.Error = fmt.Sprintf("ResourceClaim %s/%s not found", ns, name)
		return v
	}
	v.Found = true
	for _, r := range cl.Spec.Devices.Requests {
		rv := RequestView{Name: r.Name}
		if e := r.Exactly; e != nil {
			rv.Class = e.DeviceClassName
			rv.Count = requestCount(string(e.AllocationMode), e.Count)
			rv.Selectors = selectors(e.Selectors)
			if e.Capacity != nil {
				rv.Capacity = capacityRequests(e.Capacity.Requests)
			}
		} else {
			var classes []string
			for _, sr := range r.FirstAvailable {
				classes = append(classes, sr.Name+": "+sr.DeviceClassName+" "+requestCount(string(sr.AllocationMode), sr.Count))
			}
			rv.Class = "first available of " + strings.Join(classes, "; ")
		}
		v.Requests = append(v.Requests, rv)
	}
	if a := cl.Status.Allocation; a != nil {
		v.Allocated = true
		if a.NodeSelector != nil {
			v.NodeSelector = nodeSelector(a.NodeSelector)
		}
		c, err := s.snapshot(sc)
		for _, r := range a.Devices.Results {
			rv := ResultView{Request: r.Request, Driver: r.Driver, Pool: r.Pool, Device: r.Device, Consumed: capacityRequests(r.ConsumedCapacity)}
			if err == nil {
				if info := c.devices[r.Pool+"/"+r.Device]; info != nil {
					rv.Node = info.node
				}
			}
			v.Results = append(v.Results, rv)
		}
		for _, r := range cl.Status.ReservedFor {
			v.ReservedFor = append(v.ReservedFor, Ref{ns, r.Name})
		}
		return v
	}
	nodes, err := st.ExplainFiltered(sc.ctx, cl, holders, ruledOut)
	if err != nil {
		v.Error = err.Error()
		return v
	}
	v.Nodes = nodes
	for _, d := range nodes {
		if d.Fits {
			v.FitsOn++
		}
	}
	return v
}

func requestCount(mode string, count int64) string {
	if mode == string(resourceapi.DeviceAllocationModeAll) {
		return "all"
	}
	return fmt.Sprintf("%d", max(count, 1))
}

func selectors(sel []resourceapi.DeviceSelector) string {
	var out []string
	for _, s := range sel {
		if s.CEL != nil {
			out = append(out, s.CEL.Expression)
		}
	}
	return strings.Join(out, " && ")
}

func capacityRequests(m map[resourceapi.QualifiedName]resource.Quantity) string {
	var out []string
	for k, q := range m {
		out = append(out, string(k)+"="+q.String())
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

func nodeSelector(ns *corev1.NodeSelector) string {
	var terms []string
	for _, t := range ns.NodeSelectorTerms {
		var parts []string
		for _, f := range t.MatchFields {
			parts = append(parts, f.Key+" "+strings.ToLower(string(f.Operator))+" "+strings.Join(f.Values, ","))
		}
		for _, e := range t.MatchExpressions {
			parts = append(parts, e.Key+" "+strings.ToLower(string(e.Operator))+" "+strings.Join(e.Values, ","))
		}
		terms = append(terms, strings.Join(parts, " and "))
	}
	return strings.Join(terms, " or ")
}

// Package explain says why a ResourceClaim, a pod or a Kueue Workload is pending, or where
// it went: it resolves a pod's claims, runs kube-scheduler's node filters before devices and
// Kubernetes' real DRA allocator over the cluster's slices and allocated claims, reads each
// allocated device's usage as the kubelet plugin writes it in the claim's status, asks what
// the gpudra.dev/topology admission check sees of a Workload (workload.go), and returns a
// typed Report. `gpudra explain` prints it as text and the web view as HTML and JSON.
package explain

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/queueing/admission"
	"github.com/gpudra/gpudra/queueing/dependencies"
)

// Reader is where an explanation reads the cluster's objects: the API server for the
// CLI, informer caches filtered to what the caller may read for the web view.
type Reader interface {
	// Pod gets one pod; an error for a missing one (the web view tells it from others
	// with apierrors.IsNotFound).
	Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	// Nodes lists the nodes.
	Nodes(ctx context.Context) ([]*corev1.Node, error)
	// ActivePods lists the pods that are neither Succeeded nor Failed.
	ActivePods(ctx context.Context) ([]*corev1.Pod, error)
	Claims(ctx context.Context) ([]*resourceapi.ResourceClaim, error)
	Slices(ctx context.Context) ([]*resourceapi.ResourceSlice, error)
	Classes(ctx context.Context) ([]*resourceapi.DeviceClass, error)
}

// Report is what explain says; -o json and -o yaml print it whole (every node, not only
// the closest), and so does the web view's JSON.
type Report struct {
	// Pod is set for a pod: which nodes the scheduler's node filters rule out.
	Pod *PodReport `json:"pod,omitempty"`
	// Claims are the claim, or the pod's claims.
	Claims []ClaimReport `json:"claims,omitempty"`
	// Workload is set for a Kueue Workload.
	Workload *admission.Report `json:"workload,omitempty"`
	// Priority is the Workload's priority and the class it came from.
	Priority *Priority `json:"priority,omitempty"`
	// RunsAfter are the jobs the Workload's Job runs after (gpudra.dev/run-after) and where
	// each stands, in the annotation's order.
	RunsAfter []dependencies.Status `json:"runsAfter,omitempty"`
}

// PodReport lists every node with why kube-scheduler's filters before devices rule it out.
type PodReport struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Phase     string `json:"phase,omitempty"`
	// Node is the node the pod is bound to, if any.
	Node  string    `json:"node,omitempty"`
	Nodes []PodNode `json:"nodes"`
}

// RuledOut are the nodes the filters rule out.
func (p PodReport) RuledOut() []PodNode {
	var out []PodNode
	for _, n := range p.Nodes {
		if n.RuledOut != "" {
			out = append(out, n)
		}
	}
	return out
}

// PodNode is one node; RuledOut is empty when the filters let the pod onto it.
type PodNode struct {
	Node     string `json:"node"`
	RuledOut string `json:"ruledOut,omitempty"`
}

// ClaimReport says where an allocated claim is, or where a pending one fits.
type ClaimReport struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Error says why the claim could not be explained (it does not exist, say).
	Error string `json:"error,omitempty"`
	// Requests are the claim's requests, as the user wrote them.
	Requests  []Request `json:"requests,omitempty"`
	Allocated bool      `json:"allocated"`
	// NodeSelector, Results and ReservedFor are an allocated claim's allocation and the
	// pods it is reserved for.
	NodeSelector string            `json:"nodeSelector,omitempty"`
	Results      []AllocatedDevice `json:"results,omitempty"`
	ReservedFor  []string          `json:"reservedFor,omitempty"`
	// FitsOn counts the nodes the claim fits on now; Nodes are every node with devices,
	// fitting nodes first, then the closest.
	FitsOn int                        `json:"fitsOn"`
	Nodes  []allocation.NodeDiagnosis `json:"nodes,omitempty"`
	// Vendors are the vendors of the cluster's gpudra GPUs (api.VendorNVIDIA, VendorAMD,
	// VendorHygon), sorted; NodeVendors those of each node of Nodes, in the order of its
	// GPUs.
	Vendors     []string            `json:"vendors,omitempty"`
	NodeVendors map[string][]string `json:"nodeVendors,omitempty"`
}

// Found is whether the claim was read.
func (c ClaimReport) Found() bool { return c.Error == "" }

// MixedVendors is whether the cluster's GPUs are of more than one vendor, when a report
// names each device's and node's vendor.
func (c ClaimReport) MixedVendors() bool { return len(c.Vendors) > 1 }

// VendorsOf are the vendors of the node's GPUs.
func (c ClaimReport) VendorsOf(node string) []string { return c.NodeVendors[node] }

// Request is one request of a claim.
type Request struct {
	Name string `json:"name"`
	// Class is the DeviceClass, or the subrequests of a firstAvailable request.
	Class     string `json:"class"`
	Count     string `json:"count"`
	Selectors string `json:"selectors,omitempty"`
	Capacity  string `json:"capacity,omitempty"`
}

// AllocatedDevice is one device of an allocation.
type AllocatedDevice struct {
	Request string `json:"request"`
	Driver  string `json:"driver"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
	// Node is the node that publishes the device, when its slice was read.
	Node string `json:"node,omitempty"`
	// Vendor is a gpudra device's vendor (api.VendorNVIDIA, VendorAMD, VendorHygon), when
	// its slice was read.
	Vendor string `json:"vendor,omitempty"`
	// Consumed is the capacity a share takes ("compute=50, memory=40Gi").
	Consumed string `json:"consumed,omitempty"`
	// Usage is what the claim's processes use on the device, as the kubelet plugin last
	// wrote it in the claim's status.devices; nil when it has not.
	Usage *DeviceUsage `json:"usage,omitempty"`
}

// ClaimNotFoundError is a claim that does not exist, or that the caller may not read.
type ClaimNotFoundError struct{ Namespace, Name string }

func (e *ClaimNotFoundError) Error() string {
	return fmt.Sprintf("ResourceClaim %s/%s not found", e.Namespace, e.Name)
}

// NoClaimsError is a pod without ResourceClaims yet.
type NoClaimsError struct{ Namespace, Name string }

func (e *NoClaimsError) Error() string {
	return fmt.Sprintf("pod %s/%s has no ResourceClaims yet (claims from templates appear once the resourceclaim controller creates them)", e.Namespace, e.Name)
}

// Err is the first claim that could not be explained, as an error.
func (r *Report) Err() error {
	for _, c := range r.Claims {
		if c.Error != "" {
			return fmt.Errorf("%s", c.Error)
		}
	}
	return nil
}

// cluster is the allocator's view of the cluster.
type cluster struct {
	state   *allocation.State
	holders allocation.Holders
	claims  map[string]*resourceapi.ResourceClaim // namespace/name
	nodeOf  map[string]string                     // pool → node
	// vendorOf is each gpudra device's vendor (driver/pool/device), nodeVendors each
	// node's, vendors the cluster's, sorted.
	vendorOf    map[string]string
	nodeVendors map[string][]string
	vendors     []string
}

func read(ctx context.Context, r Reader) (*cluster, error) {
	classes, err := r.Classes(ctx)
	if err != nil {
		return nil, err
	}
	sl, err := r.Slices(ctx)
	if err != nil {
		return nil, err
	}
	claims, err := r.Claims(ctx)
	if err != nil {
		return nil, err
	}
	c := &cluster{state: allocation.New(classes, sl), holders: allocation.Holders{},
		claims: make(map[string]*resourceapi.ResourceClaim, len(claims)), nodeOf: map[string]string{}}
	for _, cl := range claims {
		key := cl.Namespace + "/" + cl.Name
		c.claims[key] = cl
		if a := cl.Status.Allocation; a != nil {
			c.state.Commit(a)
			c.holders.AddHolder(key, a)
		}
	}
	for _, s := range sl {
		if s.Spec.NodeName != nil {
			c.nodeOf[s.Spec.Driver+"/"+s.Spec.Pool.Name] = *s.Spec.NodeName
		}
	}
	c.readVendors(sl)
	return c, nil
}

// readVendors reads the vendor of every gpudra device of the newest generation of each
// pool, and of the nodes and the cluster.
func (c *cluster) readVendors(sl []*resourceapi.ResourceSlice) {
	c.vendorOf, c.nodeVendors = map[string]string{}, map[string][]string{}
	gen := map[string]int64{}
	for _, s := range sl {
		if s.Spec.Driver == api.DriverName {
			gen[s.Spec.Pool.Name] = max(gen[s.Spec.Pool.Name], s.Spec.Pool.Generation)
		}
	}
	for _, s := range sl {
		if s.Spec.Driver != api.DriverName || s.Spec.Pool.Generation < gen[s.Spec.Pool.Name] {
			continue
		}
		for k := range s.Spec.Devices {
			d := &s.Spec.Devices[k]
			info, err := api.ReadDevice(d)
			if err != nil || info.Vendor == "" {
				continue
			}
			c.vendorOf[s.Spec.Driver+"/"+s.Spec.Pool.Name+"/"+d.Name] = info.Vendor
			if !slices.Contains(c.vendors, info.Vendor) {
				c.vendors = append(c.vendors, info.Vendor)
			}
			if s.Spec.NodeName != nil && info.Type == api.TypeGPU && !slices.Contains(c.nodeVendors[*s.Spec.NodeName], info.Vendor) {
				c.nodeVendors[*s.Spec.NodeName] = append(c.nodeVendors[*s.Spec.NodeName], info.Vendor)
			}
		}
	}
	slices.Sort(c.vendors)
}

// Claim explains one claim. A claim that does not exist is a report whose claim has an
// Error.
func Claim(ctx context.Context, r Reader, namespace, name string) (*Report, error) {
	c, err := read(ctx, r)
	if err != nil {
		return nil, err
	}
	cr, err := c.claim(ctx, namespace, name, nil)
	if err != nil {
		return nil, err
	}
	return &Report{Claims: []ClaimReport{cr}}, nil
}

// Pod explains a pod: the scheduler's node filters, then each of its claims. A pod without
// claims is a report with its node filters and a NoClaimsError.
func Pod(ctx context.Context, r Reader, namespace, name string) (*Report, error) {
	pod, err := r.Pod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	c, err := read(ctx, r)
	if err != nil {
		return nil, err
	}
	nodes, err := r.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	pods, err := r.ActivePods(ctx)
	if err != nil {
		return nil, err
	}
	onNode := map[string][]*corev1.Pod{}
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			onNode[p.Spec.NodeName] = append(onNode[p.Spec.NodeName], p)
		}
	}
	logger := klog.FromContext(ctx)
	rep := &Report{Pod: &PodReport{Namespace: namespace, Name: name, Phase: string(pod.Status.Phase), Node: pod.Spec.NodeName}}
	ruledOut := map[string]string{}
	for _, n := range nodes {
		why := c.state.NodeFilter(logger, pod, n, onNode[n.Name])
		rep.Pod.Nodes = append(rep.Pod.Nodes, PodNode{Node: n.Name, RuledOut: why})
		if why != "" {
			ruledOut[n.Name] = why
		}
	}
	slices.SortFunc(rep.Pod.Nodes, func(a, b PodNode) int { return cmp.Compare(a.Node, b.Node) })
	names := ClaimNames(pod)
	if len(names) == 0 {
		return rep, &NoClaimsError{Namespace: namespace, Name: name}
	}
	for _, n := range names {
		cr, err := c.claim(ctx, namespace, n, ruledOut)
		if err != nil {
			return nil, err
		}
		rep.Claims = append(rep.Claims, cr)
	}
	return rep, nil
}

// ClaimNames are the names of a pod's ResourceClaims: those in its status, those it
// names in its spec, and the claim kube-scheduler made for its extended resources.
func ClaimNames(p *corev1.Pod) []string {
	var out []string
	add := func(n string) {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			add(*s.ResourceClaimName)
		}
	}
	for _, rc := range p.Spec.ResourceClaims {
		if rc.ResourceClaimName != nil {
			add(*rc.ResourceClaimName)
		}
	}
	if ext := p.Status.ExtendedResourceClaimStatus; ext != nil {
		add(ext.ResourceClaimName)
	}
	return out
}

func (c *cluster) claim(ctx context.Context, ns, name string, ruledOut map[string]string) (ClaimReport, error) {
	cr := ClaimReport{Namespace: ns, Name: name}
	cl, ok := c.claims[ns+"/"+name]
	if !ok {
		cr.Error = (&ClaimNotFoundError{Namespace: ns, Name: name}).Error()
		return cr, nil
	}
	cr.Requests = requests(cl)
	cr.Vendors = c.vendors
	if a := cl.Status.Allocation; a != nil {
		cr.Allocated = true
		if a.NodeSelector != nil {
			cr.NodeSelector = nodeSelector(a.NodeSelector)
		}
		for _, d := range a.Devices.Results {
			cr.Results = append(cr.Results, AllocatedDevice{Request: d.Request, Driver: d.Driver, Pool: d.Pool, Device: d.Device,
				Node: c.nodeOf[d.Driver+"/"+d.Pool], Vendor: c.vendorOf[d.Driver+"/"+d.Pool+"/"+d.Device], Consumed: quantities(d.ConsumedCapacity), Usage: deviceUsage(cl, d)})
		}
		for _, r := range cl.Status.ReservedFor {
			if r.Resource == "pods" {
				cr.ReservedFor = append(cr.ReservedFor, r.Name)
			}
		}
		return cr, nil
	}
	var err error
	if cr.Nodes, err = c.state.ExplainFiltered(ctx, cl, c.holders, ruledOut); err != nil {
		return cr, err
	}
	for _, d := range cr.Nodes {
		if d.Fits {
			cr.FitsOn++
		}
		if v := c.nodeVendors[d.Node]; v != nil {
			if cr.NodeVendors == nil {
				cr.NodeVendors = map[string][]string{}
			}
			cr.NodeVendors[d.Node] = v
		}
	}
	return cr, nil
}

func requests(cl *resourceapi.ResourceClaim) []Request {
	var out []Request
	for _, r := range cl.Spec.Devices.Requests {
		rv := Request{Name: r.Name}
		if e := r.Exactly; e != nil {
			rv.Class = e.DeviceClassName
			rv.Count = requestCount(e.AllocationMode, e.Count)
			rv.Selectors = selectors(e.Selectors)
			if e.Capacity != nil {
				rv.Capacity = quantities(e.Capacity.Requests)
			}
		} else {
			var classes []string
			for _, sr := range r.FirstAvailable {
				classes = append(classes, sr.Name+": "+sr.DeviceClassName+" "+requestCount(sr.AllocationMode, sr.Count))
			}
			rv.Class = "first available of " + strings.Join(classes, "; ")
		}
		out = append(out, rv)
	}
	return out
}

func requestCount(mode resourceapi.DeviceAllocationMode, count int64) string {
	if mode == resourceapi.DeviceAllocationModeAll {
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

func quantities(m map[resourceapi.QualifiedName]resource.Quantity) string {
	out := make([]string, 0, len(m))
	for k, q := range m {
		out = append(out, string(k)+"="+q.String())
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// nodeSelector writes a node selector as "key in a,b and key2 exists or ...".
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

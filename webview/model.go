package webview

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/internal/explain"
	"github.com/gpudra/gpudra/topology"
)

// GPU states, as the pages colour them.
const (
	stateFree      = "free"
	stateWhole     = "whole"
	stateShared    = "shared"
	stateMIG       = "mig"
	stateNVLink    = "nvlink"
	stateUnhealthy = "unhealthy"
)

// Ref names a namespaced object.
type Ref struct{ Namespace, Name string }

func (r Ref) String() string { return r.Namespace + "/" + r.Name }

// Holder is a claim holding a device and the pods it is reserved for.
type Holder struct {
	Claim Ref
	Pods  []Ref
}

// ShareUse is one allocation of a GPU's share device.
type ShareUse struct {
	Holder
	Memory, MemoryCapacity   string
	Compute, ComputeCapacity string
	MemoryPercent            int
	ComputePercent           int
}

// DeviceUse is an allocated MIG device or NVLink group using a GPU.
type DeviceUse struct {
	Holder
	Device string
	// Detail is the MIG profile or the group's members.
	Detail string
}

// GPU is one physical GPU of a node and everything allocated on it.
type GPU struct {
	Node, Pool string
	Index      int
	Device     string
	// Vendor is api.VendorNVIDIA, VendorAMD or VendorHygon.
	Vendor         string
	Model          string
	Memory         string
	UUID           string
	Clique, Domain string
	Taints         []resourceapi.DeviceTaint
	Unhealthy      bool
	Whole          *Holder
	Shares         []ShareUse
	MIG            []DeviceUse
	Groups         []DeviceUse
	// MIGDevices counts the MIG devices published on this GPU.
	MIGDevices int
}

// State is the GPU's main use: whole, nvlink, mig, shared, free; unhealthy when free but
// tainted unhealthy.
func (g *GPU) State() string {
	switch {
	case g.Whole != nil:
		return stateWhole
	case len(g.Groups) > 0:
		return stateNVLink
	case len(g.MIG) > 0:
		return stateMIG
	case len(g.Shares) > 0:
		return stateShared
	case g.Unhealthy:
		return stateUnhealthy
	}
	return stateFree
}

// Free is a GPU no device is allocated on and that is healthy.
func (g *GPU) Free() bool { return g.State() == stateFree }

// Node is a node with gpudra devices.
type Node struct {
	Name   string
	Models []string
	// Vendors are the vendors of the node's GPUs, in the order of their first GPU.
	Vendors []string
	GPUs    []*GPU
	Taints  []corev1.Taint
	Labels  map[string]string
	Ready   bool
	// Known is false for a pool whose node object is missing.
	Known bool
}

// Free counts the node's free GPUs.
func (n *Node) Free() int {
	c := 0
	for _, g := range n.GPUs {
		if g.Free() {
			c++
		}
	}
	return c
}

// Model is the node's GPU models joined.
func (n *Node) Model() string { return strings.Join(n.Models, ", ") }

// HasVendor is whether one of the node's GPUs is the vendor's.
func (n *Node) HasVendor(vendor string) bool { return slices.Contains(n.Vendors, vendor) }

// only is the node with only the vendor's GPUs, sharing the GPUs with n.
func (n *Node) only(vendor string) *Node {
	out := *n
	out.GPUs, out.Models, out.Vendors = nil, nil, nil
	for _, g := range n.GPUs {
		if g.Vendor == vendor {
			out.GPUs = append(out.GPUs, g)
		}
	}
	out.index()
	return &out
}

// index lists the models and vendors of the node's GPUs.
func (n *Node) index() {
	for _, g := range n.GPUs {
		if g.Model != "" && !slices.Contains(n.Models, g.Model) {
			n.Models = append(n.Models, g.Model)
		}
		if g.Vendor != "" && !slices.Contains(n.Vendors, g.Vendor) {
			n.Vendors = append(n.Vendors, g.Vendor)
		}
	}
}

// Unhealthy counts the node's unhealthy GPUs.
func (n *Node) Unhealthy() int {
	c := 0
	for _, g := range n.GPUs {
		if g.Unhealthy {
			c++
		}
	}
	return c
}

// TaintedDevice is a published device with the unhealthy taint.
type TaintedDevice struct {
	Node, Device, Type string
	Taint              resourceapi.DeviceTaint
}

// publishedDevice is what the model needs of a published device to place the claims
// allocated from it; it lives only while the model is built.
type publishedDevice struct {
	node, pool, typ string
	gpus, members   []int
	migProfile      string
	// memory and compute are a share's capacities.
	memory, compute resource.Quantity
}

// Cluster is what the informers hold, joined up.
type Cluster struct {
	Nodes   []*Node
	byName  map[string]*Node
	Tainted []TaintedDevice
	Claims  []*resourceapi.ResourceClaim
	Pods    []*corev1.Pod

	// gangList is gangs(), built once: the model is shared by requests and read only.
	gangsOnce sync.Once
	gangList  []Gang
}

// Node returns the node by name, nil when it has no gpudra devices.
func (c *Cluster) Node(name string) *Node { return c.byName[name] }

// snapshot joins the cached objects the request's caller may read. For a caller who may
// read all of them, the model is built once per burst of changes (per "changed" event)
// and shared by every request until the next; others get one of their own.
func (s *Server) snapshot(sc *scope) (*Cluster, error) {
	if sc.can(nodesResource, "") && sc.can(slicesResource, "") && sc.can(claimsResource, "") && sc.can(podsResource, "") {
		return s.sharedModel(sc)
	}
	return s.build(sc)
}

// sharedModel is the model of everything, rebuilt when the version changed.
func (s *Server) sharedModel(sc *scope) (*Cluster, error) {
	s.modelMu.Lock()
	defer s.modelMu.Unlock()
	s.mu.Lock()
	v := s.version
	s.mu.Unlock()
	if s.model != nil && s.modelVersion == v {
		return s.model, nil
	}
	c, err := s.build(sc)
	if err != nil {
		return nil, err
	}
	s.model, s.modelVersion = c, v
	return c, nil
}

func (s *Server) build(sc *scope) (*Cluster, error) {
	var nodes []*corev1.Node
	var sl []*resourceapi.ResourceSlice
	var err error
	if sc.canCluster(nodesResource) {
		if nodes, err = s.src.nodes(sc.ctx); err != nil {
			return nil, err
		}
	}
	if sc.canCluster(slicesResource) {
		if sl, err = s.src.slices(sc.ctx); err != nil {
			return nil, err
		}
	}
	claims, err := s.visibleClaims(sc)
	if err != nil {
		return nil, err
	}
	pods, err := s.visiblePods(sc)
	if err != nil {
		return nil, err
	}
	if sc.err != nil {
		return nil, sc.err
	}
	return buildCluster(nodes, sl, claims, pods), nil
}

func (s *Server) visibleClaims(sc *scope) ([]*resourceapi.ResourceClaim, error) {
	claims, err := s.src.claims(sc.ctx)
	if err != nil {
		return nil, err
	}
	return namespaced(sc, claimsResource, claims, func(c *resourceapi.ResourceClaim) string { return c.Namespace }), nil
}

func (s *Server) visiblePods(sc *scope) ([]*corev1.Pod, error) {
	pods, err := s.src.pods(sc.ctx)
	if err != nil {
		return nil, err
	}
	return namespaced(sc, podsResource, pods, func(p *corev1.Pod) string { return p.Namespace }), nil
}

func buildCluster(nodes []*corev1.Node, sl []*resourceapi.ResourceSlice, claims []*resourceapi.ResourceClaim, pods []*corev1.Pod) *Cluster {
	c := &Cluster{byName: map[string]*Node{}, Claims: claims, Pods: pods}
	devices := map[string]*publishedDevice{} // pool/device
	nodeObj := map[string]*corev1.Node{}
	for _, n := range nodes {
		nodeObj[n.Name] = n
	}
	// Only the newest generation of each pool counts.
	gen := map[string]int64{}
	for _, s := range sl {
		if s.Spec.Driver == api.DriverName {
			gen[s.Spec.Pool.Name] = max(gen[s.Spec.Pool.Name], s.Spec.Pool.Generation)
		}
	}
	gpus := map[string]*GPU{} // node/index
	gpuOf := func(node, pool string, index int) *GPU {
		key := node + "/" + strconv.Itoa(index)
		g, ok := gpus[key]
		if !ok {
			g = &GPU{Node: node, Pool: pool, Index: index, Device: fmt.Sprintf("gpu-%d", index)}
			gpus[key] = g
			n := c.byName[node]
			if n == nil {
				n = &Node{Name: node}
				if o := nodeObj[node]; o != nil {
					n.Known, n.Taints, n.Labels = true, o.Spec.Taints, o.Labels
					for _, cond := range o.Status.Conditions {
						if cond.Type == corev1.NodeReady {
							n.Ready = cond.Status == corev1.ConditionTrue
						}
					}
				}
				c.byName[node] = n
				c.Nodes = append(c.Nodes, n)
			}
			n.GPUs = append(n.GPUs, g)
		}
		return g
	}
	for _, s := range sl {
		if s.Spec.Driver != api.DriverName || s.Spec.Pool.Generation < gen[s.Spec.Pool.Name] {
			continue
		}
		node := s.Spec.Pool.Name
		if s.Spec.NodeName != nil {
			node = *s.Spec.NodeName
		}
		for k := range s.Spec.Devices {
			d := &s.Spec.Devices[k]
			// A device that does not read is shown as using no GPU.
			info, _ := api.ReadDevice(d)
			devices[s.Spec.Pool.Name+"/"+d.Name] = &publishedDevice{node: node, pool: s.Spec.Pool.Name, typ: info.Type,
				gpus: info.GPUs, members: info.Members, migProfile: info.MIGProfile, memory: info.Memory, compute: info.Compute}
			for _, i := range info.GPUs {
				g := gpuOf(node, s.Spec.Pool.Name, i)
				switch info.Type {
				case api.TypeGPU:
					g.Device = d.Name
					g.Vendor = info.Vendor
					g.Model = info.Model
					g.UUID = info.UUID
					g.Clique = info.NVLinkClique
					g.Domain = info.NVLinkDomain
					if !info.Memory.IsZero() {
						g.Memory = info.Memory.String()
					}
					g.Taints = append(g.Taints, d.Taints...)
				case api.TypeMIG:
					g.MIGDevices++
				}
			}
			for _, t := range d.Taints {
				if t.Key == api.TaintUnhealthy {
					c.Tainted = append(c.Tainted, TaintedDevice{Node: node, Device: d.Name, Type: info.Type, Taint: t})
					// A group is tainted for each of its GPUs that is: only single-GPU
					// devices say which GPU it is.
					if len(info.GPUs) == 1 {
						gpuOf(node, s.Spec.Pool.Name, info.GPUs[0]).Unhealthy = true
					}
				}
			}
		}
	}
	for _, cl := range claims {
		a := cl.Status.Allocation
		if a == nil {
			continue
		}
		h := Holder{Claim: Ref{cl.Namespace, cl.Name}}
		for _, r := range cl.Status.ReservedFor {
			if r.Resource == "pods" {
				h.Pods = append(h.Pods, Ref{cl.Namespace, r.Name})
			}
		}
		for _, r := range a.Devices.Results {
			if r.Driver != api.DriverName {
				continue
			}
			info := devices[r.Pool+"/"+r.Device]
			if info == nil {
				continue
			}
			for _, i := range info.gpus {
				g := gpuOf(info.node, info.pool, i)
				switch info.typ {
				case api.TypeGPU:
					g.Whole = &Holder{Claim: h.Claim, Pods: h.Pods}
				case api.TypeShare:
					g.Shares = append(g.Shares, shareUse(h, info.memory, info.compute, r.ConsumedCapacity))
				case api.TypeMIG:
					g.MIG = append(g.MIG, DeviceUse{Holder: h, Device: r.Device, Detail: info.migProfile})
				case api.TypeNVLinkGroup, api.TypeXGMIGroup:
					g.Groups = append(g.Groups, DeviceUse{Holder: h, Device: r.Device, Detail: topology.JoinIndices(info.members, "-")})
				}
			}
		}
	}
	for _, n := range c.Nodes {
		slices.SortFunc(n.GPUs, func(a, b *GPU) int { return cmp.Compare(a.Index, b.Index) })
		n.index()
	}
	slices.SortFunc(c.Nodes, func(a, b *Node) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(c.Tainted, func(a, b TaintedDevice) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Device, b.Device))
	})
	return c
}

func shareUse(h Holder, memCap, compCap resource.Quantity, consumed map[resourceapi.QualifiedName]resource.Quantity) ShareUse {
	u := ShareUse{Holder: h}
	get := func(name string) (resource.Quantity, bool) {
		q, ok := consumed[resourceapi.QualifiedName(name)]
		if !ok {
			q, ok = consumed[resourceapi.QualifiedName(api.DriverName+"/"+name)]
		}
		return q, ok
	}
	pct := func(used, total resource.Quantity) int {
		if total.IsZero() {
			return 0
		}
		return int(min(100, used.AsApproximateFloat64()*100/total.AsApproximateFloat64()+0.5))
	}
	u.MemoryCapacity, u.ComputeCapacity = memCap.String(), compCap.String()
	if m, ok := get(api.CapMemory); ok {
		u.Memory, u.MemoryPercent = m.String(), pct(m, memCap)
	}
	if m, ok := get(api.CapCompute); ok {
		u.Compute, u.ComputePercent = m.String(), pct(m, compCap)
	}
	return u
}

// ModelSummary counts one GPU model's GPUs by use.
type ModelSummary struct {
	Vendor, Model                                 string
	Nodes, GPUs, Whole, Shared, MIG, NVLink, Free int
	Unhealthy                                     int
}

// Summary is the cluster page's totals.
type Summary struct {
	Nodes, GPUs, Free, FreeNodes, Unhealthy int
	Models                                  []ModelSummary
}

// summary counts the nodes' GPUs.
func summary(nodes []*Node) Summary {
	var s Summary
	by := map[string]*ModelSummary{}
	for _, n := range nodes {
		s.Nodes++
		if len(n.GPUs) > 0 && n.Free() == len(n.GPUs) {
			s.FreeNodes++
		}
		seen := map[string]bool{}
		for _, g := range n.GPUs {
			model := cmp.Or(g.Model, "(unknown)")
			key := g.Vendor + "/" + model
			m := by[key]
			if m == nil {
				m = &ModelSummary{Vendor: g.Vendor, Model: model}
				by[key] = m
			}
			if !seen[key] {
				seen[key] = true
				m.Nodes++
			}
			s.GPUs++
			m.GPUs++
			switch g.State() {
			case stateWhole:
				m.Whole++
			case stateNVLink:
				m.NVLink++
			case stateMIG:
				m.MIG++
			case stateShared:
				m.Shared++
			case stateFree:
				m.Free++
				s.Free++
			}
			if g.Unhealthy {
				m.Unhealthy++
				s.Unhealthy++
			}
		}
	}
	for _, m := range by {
		s.Models = append(s.Models, *m)
	}
	slices.SortFunc(s.Models, func(a, b ModelSummary) int {
		return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.Vendor, b.Vendor))
	})
	return s
}

// Gang is a set of pods with claims under one owner (a Job, a JobSet's Job, a
// LeaderWorkerSet), or one pod alone.
type Gang struct {
	Namespace, Owner string
	Pods             []GangPod
	Running          int
}

// GangPod is one pod of a gang, where it runs and what its claims hold there.
type GangPod struct {
	Name, Node, Phase string
	Claims            []string
	Devices           []string
}

// gangs groups the pods that have resource claims by controlling owner. Callers must not
// change what it returns.
func (c *Cluster) gangs() []Gang {
	c.gangsOnce.Do(func() { c.gangList = c.buildGangs() })
	return c.gangList
}

func (c *Cluster) buildGangs() []Gang {
	claimDevices := map[string][]string{}
	for _, cl := range c.Claims {
		if a := cl.Status.Allocation; a != nil {
			for _, r := range a.Devices.Results {
				claimDevices[cl.Namespace+"/"+cl.Name] = append(claimDevices[cl.Namespace+"/"+cl.Name], r.Device)
			}
		}
	}
	by := map[string]*Gang{}
	var keys []string
	for _, p := range c.Pods {
		names := explain.ClaimNames(p)
		if len(names) == 0 {
			continue
		}
		owner := "pod/" + p.Name
		for _, o := range p.OwnerReferences {
			if o.Controller != nil && *o.Controller {
				owner = strings.ToLower(o.Kind) + "/" + o.Name
			}
		}
		key := p.Namespace + "/" + owner
		g := by[key]
		if g == nil {
			g = &Gang{Namespace: p.Namespace, Owner: owner}
			by[key] = g
			keys = append(keys, key)
		}
		gp := GangPod{Name: p.Name, Node: p.Spec.NodeName, Phase: string(p.Status.Phase), Claims: names}
		for _, n := range names {
			gp.Devices = append(gp.Devices, claimDevices[p.Namespace+"/"+n]...)
		}
		if p.Status.Phase == corev1.PodRunning {
			g.Running++
		}
		g.Pods = append(g.Pods, gp)
	}
	slices.Sort(keys)
	out := make([]Gang, 0, len(keys))
	for _, k := range keys {
		g := by[k]
		slices.SortFunc(g.Pods, func(a, b GangPod) int { return cmp.Compare(a.Name, b.Name) })
		out = append(out, *g)
	}
	return out
}

// NVLinkCell is one pair of GPUs of the NVLink matrix.
type NVLinkCell struct {
	// Link is "self", "clique" (same NVLink clique), "domain" (same NVLink domain) or "".
	Link string
}

// nvlinkMatrix says for each pair of the node's GPUs whether they share a clique or domain.
func (n *Node) nvlinkMatrix() [][]NVLinkCell {
	out := make([][]NVLinkCell, len(n.GPUs))
	for i, a := range n.GPUs {
		out[i] = make([]NVLinkCell, len(n.GPUs))
		for j, b := range n.GPUs {
			switch {
			case i == j:
				out[i][j].Link = "self"
			case a.Clique != "" && a.Clique == b.Clique:
				out[i][j].Link = "clique"
			case a.Domain != "" && a.Domain == b.Domain:
				out[i][j].Link = "domain"
			}
		}
	}
	return out
}

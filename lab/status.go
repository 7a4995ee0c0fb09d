package lab

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// Report is what `gpudra lab status` shows.
type Report struct {
	Dir, Server, Kubeconfig string
	Components              []ComponentStatus
	Nodes                   []NodeStatus
	Claims                  []ClaimStatus
	// APIError is set when the API server could not be asked.
	APIError string
}

// ComponentStatus is one lab process.
type ComponentStatus struct {
	Name    string
	PID     int
	Ports   map[string]int
	Running bool
	Log     string
}

// NodeStatus is one lab node and what its plugin published.
type NodeStatus struct {
	Node
	Ready bool
	// Devices counts published devices by their type attribute (gpu, share, mig, nvlink-group).
	Devices map[string]int
	Slices  int
}

// ClaimStatus is one ResourceClaim and where it was allocated.
type ClaimStatus struct {
	Namespace, Name string
	Allocated       bool
	Node            string   // the pool of the allocated devices (pools are named after nodes)
	Devices         []string // pool/device
	ReservedFor     []string
	// Used says a pod refers to the claim; an unused claim is not allocated before one does.
	Used bool
}

// Status reports the lab in dir: its processes, and when the API server answers, its nodes,
// their ResourceSlices and the allocated claims.
func Status(ctx context.Context, dir string) (*Report, error) {
	if dir == "" {
		dir = DefaultDir()
	}
	s, err := ReadState(dir)
	if err != nil {
		return nil, err
	}
	r := &Report{Dir: s.Dir, Server: s.Server, Kubeconfig: Layout{s.Dir}.Kubeconfig()}
	for _, c := range s.Components {
		r.Components = append(r.Components, ComponentStatus{Name: c.Name, PID: c.PID, Ports: c.Ports, Running: alive(c), Log: c.Log})
	}
	cfg, err := s.RESTConfig()
	if err != nil {
		r.APIError = err.Error()
		return r, nil
	}
	cfg.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		r.APIError = err.Error()
		return r, nil
	}
	if err := r.fill(ctx, cs, s.Nodes); err != nil {
		r.APIError = err.Error()
	}
	return r, nil
}

func (r *Report) fill(ctx context.Context, cs kubernetes.Interface, nodes []Node) error {
	notReady, err := notReadyNodes(ctx, cs, nodes)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		ns := NodeStatus{Node: n, Ready: !contains(notReady, n.Name), Devices: map[string]int{}}
		slices, err := NodeSlices(ctx, cs, n.Name)
		if err != nil {
			return err
		}
		ns.Slices = len(slices)
		for _, s := range slices {
			for _, d := range s.Spec.Devices {
				ns.Devices[DeviceType(d)]++
			}
		}
		r.Nodes = append(r.Nodes, ns)
	}
	claims, err := ListClaims(ctx, cs, metav1.NamespaceAll)
	if err != nil {
		return err
	}
	r.Claims = claims
	return nil
}

// DeviceType is a device's gpudra type attribute (gpu, share, mig, nvlink-group).
func DeviceType(d resourcev1.Device) string {
	if t := api.DeviceType(&d); t != "" {
		return t
	}
	return "(untyped)"
}

// ListClaims summarises the ResourceClaims in namespace (all when empty), sorted by name.
func ListClaims(ctx context.Context, cs kubernetes.Interface, namespace string) ([]ClaimStatus, error) {
	list, err := cs.ResourceV1().ResourceClaims(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	for _, p := range pods.Items {
		for _, rc := range p.Spec.ResourceClaims {
			if rc.ResourceClaimName != nil {
				used[p.Namespace+"/"+*rc.ResourceClaimName] = true
			}
		}
		for _, st := range p.Status.ResourceClaimStatuses {
			if st.ResourceClaimName != nil {
				used[p.Namespace+"/"+*st.ResourceClaimName] = true
			}
		}
	}
	var out []ClaimStatus
	for _, c := range list.Items {
		st := claimStatus(c)
		st.Used = used[c.Namespace+"/"+c.Name] || len(st.ReservedFor) > 0
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

func claimStatus(c resourcev1.ResourceClaim) ClaimStatus {
	st := ClaimStatus{Namespace: c.Namespace, Name: c.Name}
	for _, ref := range c.Status.ReservedFor {
		st.ReservedFor = append(st.ReservedFor, strings.TrimSuffix(ref.Resource, "s")+"/"+ref.Name)
	}
	a := c.Status.Allocation
	if a == nil {
		return st
	}
	st.Allocated = true
	pools := map[string]bool{}
	for _, res := range a.Devices.Results {
		if res.Driver != api.DriverName {
			continue
		}
		pools[res.Pool] = true
		st.Devices = append(st.Devices, res.Device)
	}
	var ps []string
	for p := range pools {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	st.Node = strings.Join(ps, ",")
	return st
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Write prints the report as tables.
func (r *Report) Write(w io.Writer) {
	fmt.Fprintf(w, "Lab %s\n  API server %s   kubeconfig %s\n\n", r.Dir, r.Server, r.Kubeconfig)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COMPONENT\tSTATE\tPID\tPORTS (127.0.0.1)\tLOG")
	for _, c := range r.Components {
		state := "down"
		if c.Running {
			state = "up"
		}
		var ports []string
		for _, k := range sortedKeys(c.Ports) {
			ports = append(ports, k+"="+strconv.Itoa(c.Ports[k]))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", c.Name, state, c.PID, strings.Join(ports, " "), c.Log)
	}
	tw.Flush()
	if r.APIError != "" {
		fmt.Fprintf(w, "\nAPI server not answering: %s\n", r.APIError)
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tREADY\tPROFILE\tBLOCK\tRACK\tTOR\tSLICES\tDEVICES")
	for _, n := range r.Nodes {
		var devs []string
		for _, t := range sortedKeys(n.Devices) {
			devs = append(devs, fmt.Sprintf("%s=%d", t, n.Devices[t]))
		}
		fmt.Fprintf(tw, "%s\t%v\t%s\t%s\t%s\t%s\t%d\t%s\n", n.Name, n.Ready, n.Profile, n.Block, n.Rack, n.ToR, n.Slices, strings.Join(devs, " "))
	}
	tw.Flush()
	fmt.Fprintln(w)
	if len(r.Claims) == 0 {
		fmt.Fprintln(w, "No ResourceClaims.")
		return
	}
	WriteClaims(w, r.Claims)
}

// WriteClaims prints claims as a table: claim → node → devices.
func WriteClaims(w io.Writer, claims []ClaimStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLAIM\tNODE\tDEVICES\tUSED BY")
	for _, c := range claims {
		node, devs := c.Node, strings.Join(c.Devices, ",")
		switch {
		case !c.Allocated && c.Used:
			node, devs = "(pending)", "-"
		case !c.Allocated:
			node, devs = "(no pod uses it yet)", "-"
		}
		used := strings.Join(c.ReservedFor, ",")
		if used == "" {
			used = "-"
		}
		fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\n", c.Namespace, c.Name, node, devs, used)
	}
	tw.Flush()
}

package webview

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// pageNames are the templates under templates/, each with the layout.
var pageNames = []string{"cluster", "node", "queues", "explain", "workload", "defrag"}

type pageTemplate struct{ *template.Template }

// page is what every template gets: Base for links, the page's title and data, and the
// resources of which the caller may not read some or all (left out of the page).
type page struct {
	Base, Title, Nav string
	Generated        string
	Hidden           []string
	Data             any
}

var funcs = template.FuncMap{
	"join": strings.Join,
	"list": func(v ...string) []string { return v },
	"dict": func(kv ...any) (map[string]any, error) {
		if len(kv)%2 != 0 {
			return nil, fmt.Errorf("dict: odd number of arguments")
		}
		m := make(map[string]any, len(kv)/2)
		for k := 0; k < len(kv); k += 2 {
			key, ok := kv[k].(string)
			if !ok {
				return nil, fmt.Errorf("dict: key %v is not a string", kv[k])
			}
			m[key] = kv[k+1]
		}
		return m, nil
	},
	"pct": func(n, total int) int {
		if total == 0 {
			return 0
		}
		return n * 100 / total
	},
	// width is the class of a width in percent, clamped to 0..100 (style.css has one
	// class per percent).
	"width":       func(percent int) string { return "w-" + strconv.Itoa(min(100, max(0, percent))) },
	"labelBlock":  func(l map[string]string) string { return l[api.LabelBlock] },
	"vendorName":  api.VendorName,
	"vendorNames": vendorNames,
	"labelRack":   func(l map[string]string) string { return l[api.LabelRack] },
	"shortUUID": func(s string) string {
		if len(s) > 12 {
			return s[:12] + "…"
		}
		return s
	},
}

// vendorNames are vendors as people write them, joined.
func vendorNames(vendors []string) string {
	out := make([]string, len(vendors))
	for k, v := range vendors {
		out[k] = api.VendorName(v)
	}
	return strings.Join(out, ", ")
}

func parsePages() (map[string]*pageTemplate, error) {
	out := map[string]*pageTemplate{}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("webview: template %s: %w", name, err)
		}
		out[name] = &pageTemplate{t}
	}
	return out, nil
}

// formats are the accepted values of ?format= ("" is HTML unless the request accepts
// application/json).
var formats = []string{"html", "json"}

// wantsJSON is whether the request asks for JSON: ?format=json, or an Accept header naming
// application/json without ?format=html.
func wantsJSON(r *http.Request) (bool, error) {
	switch f := r.URL.Query().Get("format"); f {
	case "json":
		return true, nil
	case "html":
		return false, nil
	case "":
		return strings.Contains(r.Header.Get("Accept"), "application/json"), nil
	default:
		return false, fmt.Errorf("format %q: accepted values are %s", f, strings.Join(formats, ", "))
	}
}

// JSONPage is a page as JSON: the same data as its HTML, and the resources of which the
// caller may not read some or all (left out of the data).
type JSONPage struct {
	Title  string   `json:"title"`
	Hidden []string `json:"hidden,omitempty"`
	Data   any      `json:"data"`
}

// page renders a page; with ?fragment=1 only its content, which the script swaps in; as
// JSON for ?format=json or Accept: application/json. A request whose caller's rights could
// not be checked fails with 500.
func (s *Server) page(name string, build func(*http.Request, *scope) (title, nav string, data any, status int)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.ready() {
			http.Error(w, "the dashboard's caches are still filling; try again in a moment", http.StatusServiceUnavailable)
			return
		}
		asJSON, err := wantsJSON(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		sc := s.scope(r)
		title, nav, data, status := build(r, sc)
		if sc.err != nil {
			klog.FromContext(r.Context()).Error(sc.err, "Checking what the caller may read", "path", r.URL.Path)
			http.Error(w, "checking what you may read: "+sc.err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Add("Vary", "Accept")
		if asJSON {
			data, err := json.Marshal(JSONPage{Title: title, Hidden: sc.hidden, Data: data})
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write(append(data, '\n'))
			return
		}
		p := page{Base: s.base, Title: title, Nav: nav, Data: data, Hidden: sc.hidden, Generated: time.Now().UTC().Format("15:04:05")}
		tmpl := "layout"
		if r.URL.Query().Get("fragment") != "" {
			tmpl = "content"
		}
		var buf bytes.Buffer
		if err := s.pages[name].ExecuteTemplate(&buf, tmpl, p); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(status)
		_, _ = w.Write(buf.Bytes())
	}
}

// ClusterPage is the cluster page's data.
// Summary, Tainted, and the pages of Nodes and Gangs are those the listing's filters
// keep: nodes by name, model and vendor (a node's GPUs of that vendor alone), gangs by
// namespace and the nodes their pods run on.
type ClusterPage struct {
	List    Listing
	Summary Summary
	Nodes   []*Node
	Tainted []TaintedDevice
	Gangs   []Gang
	Error   string
}

func (s *Server) clusterPage(r *http.Request, sc *scope) (string, string, any, int) {
	l, err := parseListing(r)
	if err != nil {
		return "Cluster", "cluster", ClusterPage{List: l, Error: err.Error()}, http.StatusBadRequest
	}
	c, err := s.snapshot(sc)
	if err != nil {
		return "Cluster", "cluster", ClusterPage{List: l, Error: err.Error()}, http.StatusInternalServerError
	}
	p := ClusterPage{List: l}
	nodes := c.Nodes
	if l.Node != "" || l.Model != "" || l.Vendor != "" {
		nodes = nil
		for _, n := range c.Nodes {
			if l.Vendor != "" {
				if !n.HasVendor(l.Vendor) {
					continue
				}
				n = n.only(l.Vendor)
			}
			if matches(l.Node, n.Name) && matches(l.Model, n.Model()) {
				nodes = append(nodes, n)
			}
		}
	}
	for _, t := range c.Tainted {
		n := c.Node(t.Node)
		if matches(l.Node, t.Node) && (l.Model == "" || n != nil && matches(l.Model, n.Model())) && (l.Vendor == "" || n != nil && n.HasVendor(l.Vendor)) {
			p.Tainted = append(p.Tainted, t)
		}
	}
	var gangs []Gang
	for _, g := range c.gangs() {
		if l.Namespace != "" && g.Namespace != l.Namespace {
			continue
		}
		if l.Node != "" {
			pods := g.Pods[:0:0]
			for _, gp := range g.Pods {
				if gp.Node != "" && matches(l.Node, gp.Node) {
					pods = append(pods, gp)
				}
			}
			if len(pods) == 0 {
				continue
			}
			g.Pods = pods
		}
		gangs = append(gangs, g)
	}
	p.Summary = summary(nodes)
	p.Nodes = paginate(&p.List, nodes)
	p.Gangs = paginate(&p.List, gangs)
	return "Cluster", "cluster", p, http.StatusOK
}

// NodePage is the node page's data.
type NodePage struct {
	Name   string
	Node   *Node
	Matrix [][]NVLinkCell
	Gangs  []Gang
	Error  string
}

func (s *Server) nodePage(r *http.Request, sc *scope) (string, string, any, int) {
	name := r.PathValue("name")
	c, err := s.snapshot(sc)
	if err != nil {
		return name, "cluster", NodePage{Name: name, Error: err.Error()}, http.StatusInternalServerError
	}
	n := c.Node(name)
	if n == nil {
		return name, "cluster", NodePage{Name: name, Error: "no node " + name + " publishes gpudra devices"}, http.StatusNotFound
	}
	var gangs []Gang
	for _, g := range c.gangs() {
		var pods []GangPod
		for _, p := range g.Pods {
			if p.Node == name {
				pods = append(pods, p)
			}
		}
		if len(pods) > 0 {
			g.Pods = pods
			gangs = append(gangs, g)
		}
	}
	return "Node " + name, "cluster", NodePage{Name: name, Node: n, Matrix: n.nvlinkMatrix(), Gangs: gangs}, http.StatusOK
}

func (s *Server) queuesPage(r *http.Request, sc *scope) (string, string, any, int) {
	l, err := parseListing(r)
	if err != nil {
		return "Queues", "queues", Queues{List: l, Error: err.Error()}, http.StatusBadRequest
	}
	q := s.queues(sc)
	q.List = l
	if l.Queue != "" {
		queues := q.Queues[:0:0]
		for _, v := range q.Queues {
			if matches(l.Queue, v.Name) {
				queues = append(queues, v)
			}
		}
		q.Queues = queues
	}
	if l.Queue != "" || l.Namespace != "" {
		pending := q.Pending[:0:0]
		for _, p := range q.Pending {
			if (l.Namespace == "" || p.Namespace == l.Namespace) && (matches(l.Queue, p.ClusterQueue) || matches(l.Queue, p.Queue)) {
				pending = append(pending, p)
			}
		}
		q.Pending = pending
	}
	q.Queues = paginate(&q.List, q.Queues)
	q.Pending = paginate(&q.List, q.Pending)
	return "Queues", "queues", q, http.StatusOK
}

func (s *Server) claimPage(r *http.Request, sc *scope) (string, string, any, int) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	e := s.explainClaim(sc, ns, name)
	status := http.StatusOK
	if len(e.Claims) == 1 && !e.Claims[0].Found() {
		status = http.StatusNotFound
	}
	return "Claim " + ns + "/" + name, "", e, status
}

func (s *Server) podPage(r *http.Request, sc *scope) (string, string, any, int) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	e, found := s.explainPod(sc, ns, name)
	status := http.StatusOK
	if !found {
		status = http.StatusNotFound
	}
	return "Pod " + ns + "/" + name, "", e, status
}

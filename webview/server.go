// Package webview serves a read-only web view of a gpudra cluster: GPUs by model and node,
// what each allocated claim holds, Kueue queues, why a claim, pod or Workload is pending,
// and how fragmented the GPUs are with the moves that would free a node. Pages are rendered on the server from informer caches; a Server-Sent Events
// stream tells the page when the cluster changed, and a small script fetches the page's
// content again.
package webview

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/gpudra/gpudra/topology"
)

//go:embed static templates
var assets embed.FS

// Kueue's API the queues page reads.
var (
	KueueGroupVersion = schema.GroupVersion{Group: "kueue.x-k8s.io", Version: "v1beta2"}

	clusterQueuesGVR   = KueueGroupVersion.WithResource("clusterqueues")
	cohortsGVR         = KueueGroupVersion.WithResource("cohorts")
	localQueuesGVR     = KueueGroupVersion.WithResource("localqueues")
	workloadsGVR       = KueueGroupVersion.WithResource("workloads")
	admissionChecksGVR = KueueGroupVersion.WithResource("admissionchecks")
	// resourceFlavorsGVR is read only for a Workload's page, one flavor at a time.
	resourceFlavorsGVR = KueueGroupVersion.WithResource("resourceflavors")
)

// KueueResources are the Kueue resources the queues page watches.
var KueueResources = []schema.GroupVersionResource{clusterQueuesGVR, cohortsGVR, localQueuesGVR, workloadsGVR, admissionChecksGVR}

// Options configure a Server.
type Options struct {
	// Kube reads nodes, pods and the DRA API through informers the Server runs.
	Kube kubernetes.Interface
	// Dynamic reads Kueue's objects beside Kube; nil, or a cluster that does not serve
	// kueue.x-k8s.io/v1beta2, leaves the queues page empty.
	Dynamic dynamic.Interface
	// Cache, instead of Kube and Dynamic, is a controller-runtime cache its owner starts
	// (a manager's): the Server reads through it and keeps no objects of its own. Kueue's
	// kinds must be in its scheme.
	Cache Cache
	// CacheHasJobs says that Cache holds batch/v1 Jobs (gpudra-controller's does with
	// JobDependencies): a Workload's page then shows what its Job runs after. With Kube,
	// the page gets those Jobs from the API server.
	CacheHasJobs bool
	// Access, when set, says for each request what its caller may read; nil shows
	// everything the Server reads.
	Access func(*http.Request) Access
	// Labels are the node labels holding a node's block, rack and top-of-rack switch, as
	// the controller's --block-label, --rack-label and --tor-label (default: gpudra's own).
	Labels topology.LabelKeys
	// Base is the URL path the handler is mounted at ("" or "/dashboard"); links carry it.
	Base string
	// Debounce is how long a burst of changes is collected before one "changed" event
	// (default 250ms).
	Debounce time.Duration
}

// Server serves the pages. Start it, then serve it.
type Server struct {
	opts  Options
	base  string
	pages map[string]*pageTemplate
	mux   *http.ServeMux
	src   source
	// labels are Options.Labels, defaulted.
	labels topology.LabelKeys

	mu      sync.Mutex
	synced  bool
	version uint64
	subs    map[chan uint64]struct{}
	pending bool

	// model is the model of everything at modelVersion, shared by the requests of
	// callers who may read everything (snapshot).
	modelMu      sync.Mutex
	model        *Cluster
	modelVersion uint64

	// defrag is the last measurement and plan of the defragmentation page.
	defragMu sync.Mutex
	defrag   *defragResult
}

// New makes a Server; Start begins watching.
func New(o Options) (*Server, error) {
	var src source
	switch {
	case o.Cache != nil && (o.Kube != nil || o.Dynamic != nil):
		return nil, fmt.Errorf("webview: both a cache and clients to read with; give one")
	case o.Cache != nil:
		src = &cacheSource{c: o.Cache, jobs: o.CacheHasJobs}
	case o.Kube != nil:
		src = &informerSource{kubeClient: o.Kube, dynClient: o.Dynamic}
	default:
		return nil, fmt.Errorf("webview: no Kubernetes client or cache")
	}
	if o.Debounce <= 0 {
		o.Debounce = 250 * time.Millisecond
	}
	labels := o.Labels
	if labels == (topology.LabelKeys{}) {
		labels = topology.DefaultLabelKeys
	}
	s := &Server{opts: o, base: strings.TrimSuffix(o.Base, "/"), subs: map[chan uint64]struct{}{}, src: src, labels: labels}
	var err error
	if s.pages, err = parsePages(); err != nil {
		return nil, err
	}
	s.routes()
	return s, nil
}

// Start fills the caches (with Options.Cache, waits until they are filled) and watches
// them until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	if err := s.src.start(ctx, s.changed); err != nil {
		return err
	}
	s.mu.Lock()
	s.synced = true
	s.mu.Unlock()
	context.AfterFunc(ctx, s.closeSubscribers)
	return nil
}

// changed schedules one "changed" event for a burst of informer events.
func (s *Server) changed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending {
		return
	}
	s.pending = true
	time.AfterFunc(s.opts.Debounce, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.pending = false
		s.version++
		for ch := range s.subs {
			select {
			case ch <- s.version:
			default:
			}
		}
	})
}

func (s *Server) subscribe() (chan uint64, func()) {
	ch := make(chan uint64, 1)
	s.mu.Lock()
	s.subs[ch] = struct{}{}
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.subs[ch]; ok {
			delete(s.subs, ch)
			close(ch)
		}
	}
}

func (s *Server) closeSubscribers() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.subs {
		delete(s.subs, ch)
		close(ch)
	}
}

// ServeHTTP serves the pages under Options.Base, every response with SecurityHeaders.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	SecurityHeaders(w.Header())
	if s.base != "" {
		http.StripPrefix(s.base, s.mux).ServeHTTP(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

func (s *Server) routes() {
	s.mux = http.NewServeMux()
	static, _ := fs.Sub(assets, "static")
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	s.mux.HandleFunc("GET /events", s.serveEvents)
	s.mux.HandleFunc("GET /{$}", s.page("cluster", s.clusterPage))
	s.mux.HandleFunc("GET /nodes/{name}", s.page("node", s.nodePage))
	s.mux.HandleFunc("GET /queues", s.page("queues", s.queuesPage))
	s.mux.HandleFunc("GET /defrag", s.page("defrag", s.defragPage))
	s.mux.HandleFunc("GET /claims/{namespace}/{name}", s.page("explain", s.claimPage))
	s.mux.HandleFunc("GET /pods/{namespace}/{name}", s.page("explain", s.podPage))
	s.mux.HandleFunc("GET /workloads/{namespace}/{name}", s.page("workload", s.workloadPage))
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready() {
			http.Error(w, "caches not filled yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
}

func (s *Server) ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.synced
}

// serveEvents is the Server-Sent Events stream: an event "changed" whose data is a counter
// after each burst of changes, and a comment every 20s to keep proxies from closing it.
func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	ch, cancel := s.subscribe()
	defer cancel()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s.mu.Lock()
	v := s.version
	s.mu.Unlock()
	fmt.Fprintf(w, "retry: 2000\nevent: hello\ndata: %d\n\n", v)
	flusher.Flush()
	tick := time.NewTicker(20 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case v, ok := <-ch:
			if !ok {
				return
			}
			fmt.Fprintf(w, "event: changed\ndata: %d\n\n", v)
			flusher.Flush()
		case <-tick.C:
			fmt.Fprint(w, ": ping\n\n")
			flusher.Flush()
		}
	}
}

// Package webview serves a read-only web view of a gpudra cluster: GPUs by model and node,
// what each allocated claim holds, Kueue queues and why a claim or pod is pending. Pages are
// rendered on the server from informer caches; a Server-Sent Events stream tells the page
// when the cluster changed, and a small script fetches the page's content again.
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
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
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
)

// KueueResources are the Kueue resources the queues page watches.
var KueueResources = []schema.GroupVersionResource{clusterQueuesGVR, cohortsGVR, localQueuesGVR, workloadsGVR, admissionChecksGVR}

// KueueSyncTimeout is how long Start waits for Kueue's objects before it serves without
// those it could not read (a user without list on cohorts, say).
var KueueSyncTimeout = 10 * time.Second

// Options configure a Server.
type Options struct {
	// Kube reads nodes, pods and the DRA API.
	Kube kubernetes.Interface
	// Dynamic reads Kueue's objects; nil, or a cluster that does not serve
	// kueue.x-k8s.io/v1beta2, leaves the queues page empty.
	Dynamic dynamic.Interface
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

	kube      informers.SharedInformerFactory
	dyn       dynamicinformer.DynamicSharedInformerFactory
	kueue     bool
	nodes     listersv1.NodeLister
	pods      listersv1.PodLister
	slices    resourcelisters.ResourceSliceLister
	claims    resourcelisters.ResourceClaimLister
	classes   resourcelisters.DeviceClassLister
	kueueList map[schema.GroupVersionResource]cache.GenericLister
	kueueInf  map[schema.GroupVersionResource]cache.SharedIndexInformer

	mu      sync.Mutex
	synced  bool
	version uint64
	subs    map[chan uint64]struct{}
	pending bool
}

// New makes a Server; Start begins watching.
func New(o Options) (*Server, error) {
	if o.Kube == nil {
		return nil, fmt.Errorf("webview: no Kubernetes client")
	}
	if o.Debounce <= 0 {
		o.Debounce = 250 * time.Millisecond
	}
	s := &Server{opts: o, base: strings.TrimSuffix(o.Base, "/"), subs: map[chan uint64]struct{}{}}
	var err error
	if s.pages, err = parsePages(); err != nil {
		return nil, err
	}
	s.routes()
	return s, nil
}

// Start starts the informers and waits until their caches are filled; they stop with ctx.
func (s *Server) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	s.kube = informers.NewSharedInformerFactory(s.opts.Kube, 0)
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.changed() },
		UpdateFunc: func(any, any) { s.changed() },
		DeleteFunc: func(any) { s.changed() },
	}
	for _, inf := range []cache.SharedIndexInformer{
		s.kube.Core().V1().Nodes().Informer(),
		s.kube.Core().V1().Pods().Informer(),
		s.kube.Resource().V1().ResourceSlices().Informer(),
		s.kube.Resource().V1().ResourceClaims().Informer(),
		s.kube.Resource().V1().DeviceClasses().Informer(),
	} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
	}
	s.nodes = s.kube.Core().V1().Nodes().Lister()
	s.pods = s.kube.Core().V1().Pods().Lister()
	s.slices = s.kube.Resource().V1().ResourceSlices().Lister()
	s.claims = s.kube.Resource().V1().ResourceClaims().Lister()
	s.classes = s.kube.Resource().V1().DeviceClasses().Lister()
	if s.opts.Dynamic != nil {
		if _, err := s.opts.Kube.Discovery().ServerResourcesForGroupVersion(KueueGroupVersion.String()); err == nil {
			s.kueue = true
		} else {
			logger.Info("Kueue's API is not served; the queues page stays empty", "groupVersion", KueueGroupVersion.String(), "err", err)
		}
	}
	if s.kueue {
		s.dyn = dynamicinformer.NewDynamicSharedInformerFactory(s.opts.Dynamic, 0)
		s.kueueList = map[schema.GroupVersionResource]cache.GenericLister{}
		s.kueueInf = map[schema.GroupVersionResource]cache.SharedIndexInformer{}
		for _, gvr := range KueueResources {
			inf := s.dyn.ForResource(gvr)
			if _, err := inf.Informer().AddEventHandler(handler); err != nil {
				return err
			}
			s.kueueList[gvr] = inf.Lister()
			s.kueueInf[gvr] = inf.Informer()
		}
	}
	s.kube.Start(ctx.Done())
	if s.dyn != nil {
		s.dyn.Start(ctx.Done())
	}
	for typ, ok := range s.kube.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("webview: the %v cache did not fill", typ)
		}
	}
	if s.dyn != nil {
		// Kueue's objects are not required: a cluster or a user that cannot list some of
		// them still gets the other pages; the queues page names those not read yet.
		wait, cancel := context.WithTimeout(ctx, KueueSyncTimeout)
		for gvr, ok := range s.dyn.WaitForCacheSync(wait.Done()) {
			if !ok {
				logger.Info("Kueue objects not read yet; the queues page goes without them until they are", "resource", gvr.Resource)
			}
		}
		cancel()
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

// ServeHTTP serves the pages under Options.Base.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
	s.mux.HandleFunc("GET /claims/{namespace}/{name}", s.page("explain", s.claimPage))
	s.mux.HandleFunc("GET /pods/{namespace}/{name}", s.page("explain", s.podPage))
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

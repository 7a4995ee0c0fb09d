package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"

	"github.com/gpudra/gpudra/topology"
	"github.com/gpudra/gpudra/webview"
)

// dashboardPath is where the controller serves the web view; callers need get on the
// non-resource URLs /dashboard and /dashboard/* (a SubjectAccessReview per request path).
const dashboardPath = "/dashboard"

// dashboard serves the web view over HTTPS at --dashboard-bind-address, on every
// replica, to callers the API server authenticates (TokenReview) and authorizes
// (SubjectAccessReview). It reads through the manager's cache and shows each caller only
// what the caller may list.
type dashboard struct {
	addr, certDir string
	cfg           *rest.Config
	httpClient    *http.Client
	cache         webview.Cache
	// labels are the node labels of blocks, racks and switches (--block-label and the rest).
	labels topology.LabelKeys
	// jobs: the cache holds batch/v1 Jobs (JobDependencies watches them), so a Workload's
	// page shows what its Job runs after.
	jobs bool
}

// NeedLeaderElection is false: every replica serves the dashboard.
func (dashboard) NeedLeaderElection() bool { return false }

func (d dashboard) Start(ctx context.Context) error {
	auth, err := newDashboardAuth(d.cfg, d.httpClient)
	if err != nil {
		return err
	}
	view, err := webview.New(webview.Options{Cache: d.cache, Base: dashboardPath, Access: auth.access, Labels: d.labels, CacheHasJobs: d.jobs})
	if err != nil {
		return err
	}
	tlsConfig, err := d.tlsConfig(ctx)
	if err != nil {
		return err
	}
	ln, err := tls.Listen("tcp", d.addr, tlsConfig)
	if err != nil {
		return fmt.Errorf("--dashboard-bind-address=%s: %w", d.addr, err)
	}
	srv := &http.Server{Handler: auth.wrap(dashboardMux(view), klog.FromContext(ctx).WithName("dashboard")), ReadHeaderTimeout: 30 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() {
		if err := view.Start(ctx); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Dashboard caches")
		}
	}()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	klog.FromContext(ctx).Info("Serving the dashboard", "address", ln.Addr().String(), "path", dashboardPath+"/")
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func dashboardMux(view http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(dashboardPath+"/", view)
	mux.Handle(dashboardPath, http.RedirectHandler(dashboardPath+"/", http.StatusFound))
	return mux
}

// tlsConfig serves tls.crt and tls.key from --dashboard-cert-dir, reloaded when they
// change, or a self-signed certificate made at start.
func (d dashboard) tlsConfig(ctx context.Context) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if d.certDir != "" {
		w, err := certwatcher.New(filepath.Join(d.certDir, "tls.crt"), filepath.Join(d.certDir, "tls.key"))
		if err != nil {
			return nil, err
		}
		go func() { _ = w.Start(ctx) }()
		cfg.GetCertificate = w.GetCertificate
		return cfg, nil
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("gpudra-controller", nil, nil)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	cfg.Certificates = []tls.Certificate{cert}
	return cfg, nil
}

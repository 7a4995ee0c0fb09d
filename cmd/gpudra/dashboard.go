package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/gpudra/gpudra/webview"
)

func newDashboardCommand() *cobra.Command {
	cf := &clientFlags{}
	var listen string
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve a read-only web view of the cluster's GPUs, queues and claims",
		Long: `Dashboard watches the cluster with your kubeconfig and serves a read-only web view: GPUs
by model and node, which claim and pod holds each GPU, shares with their memory and compute,
MIG devices, NVLink, unhealthy devices, Kueue's ClusterQueues and pending Workloads, and for a
claim or pod what gpudra explain says. Pages update as the cluster changes.

It binds 127.0.0.1 by default: anyone who reaches the address sees what your credentials
can read. It answers only requests for 127.0.0.1, localhost or [::1] at its port (or the
address it is bound to), so a web page you visit cannot read it through a name rebound to
this machine, and every response carries a strict Content-Security-Policy.`,
		Example: `  gpudra dashboard
  gpudra dashboard --context lab --listen 127.0.0.1:9090`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return serveDashboard(ctx, cmd, cf, listen)
		},
	}
	cf.addFlags(cmd.Flags())
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8080", "address to serve the dashboard at")
	return cmd
}

func serveDashboard(ctx context.Context, cmd *cobra.Command, cf *clientFlags, listen string) error {
	cfg, err := cf.config().ClientConfig()
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	srv, err := webview.New(webview.Options{Kube: kube, Dynamic: dyn})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", listen, err)
	}
	hs := &http.Server{Handler: localDashboard(ln.Addr(), srv), ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	errs := make(chan error, 1)
	go func() { errs <- hs.Serve(ln) }()
	fmt.Fprintf(cmd.ErrOrStderr(), "gpudra dashboard: filling caches from %s\n", cfg.Host)
	if err := srv.Start(ctx); err != nil {
		_ = hs.Close()
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "gpudra dashboard: serving http://%s/ (Ctrl-C stops it)\n", ln.Addr())
	select {
	case err := <-errs:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutdown); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// localDashboard serves the view only to requests that name this machine in their Host
// header (webview.LocalHosts): DNS rebinding cannot reach it from another site's page.
func localDashboard(addr net.Addr, view http.Handler) http.Handler {
	return webview.LocalHosts(addr, view)
}

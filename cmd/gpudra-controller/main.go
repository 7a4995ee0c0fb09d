// Command gpudra-controller is gpudra's cluster-side controller: the Kueue admission
// check "gpudra.dev/topology" that places whole gangs on racks with the real DRA allocator.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"

	"github.com/spf13/cobra"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	configwebhook "github.com/gpudra/gpudra/driver/config/webhook"
	"github.com/gpudra/gpudra/queueing/admission"
	"github.com/gpudra/gpudra/queueing/network"
	"github.com/gpudra/gpudra/topology"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "gpudra-controller:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	var kubeconfig, metricsAddr, probeAddr, topologyConfigMap string
	var flavorNodeLabels map[string]string
	var profiling bool
	var webhookPort, apiBurst, admissionWorkers int
	var apiQPS float32
	var webhookHost, webhookCertDir, webhookCertNames string
	labels := topology.DefaultLabelKeys
	cmd := &cobra.Command{
		Use:           "gpudra-controller",
		Short:         "gpudra's cluster-side controller (Kueue admission check gpudra.dev/topology)",
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := validateAdmissionCheckWorkers(admissionWorkers); err != nil {
				return err
			}
			ctrl.SetLogger(klog.NewKlogr())
			scheme := runtime.NewScheme()
			for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, resourceapi.AddToScheme, kueue.AddToScheme} {
				if err := add(scheme); err != nil {
					return err
				}
			}
			cfg, err := ctrl.GetConfig()
			if kubeconfig != "" {
				cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
			}
			if err != nil {
				return fmt.Errorf("kubernetes client config: %w", err)
			}
			// The same client rate whichever way the config was loaded (client-go's default
			// for a kubeconfig file is 5 QPS, which alone capped admissions at ~1.6/s).
			cfg.QPS, cfg.Burst = apiQPS, apiBurst
			opts := ctrl.Options{
				Scheme:                 scheme,
				Metrics:                metricsserver.Options{BindAddress: metricsAddr, ExtraHandlers: profilingHandlers(profiling)},
				HealthProbeBindAddress: probeAddr,
				// Nothing here reads managedFields; dropped from the cache, every pod, claim,
				// slice and Workload costs less to keep and to list (writes of cached objects
				// send none, which keeps the server's).
				Cache: cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
			}
			if webhookPort > 0 {
				if webhookCertNames != "" {
					if err := selfSignedWebhookCert(cmd.Context(), cfg, scheme, webhookCertDir, webhookCertNames); err != nil {
						return err
					}
				}
				opts.WebhookServer = webhook.NewServer(webhook.Options{Host: webhookHost, Port: webhookPort, CertDir: webhookCertDir})
			}
			mgr, err := ctrl.NewManager(cfg, opts)
			if err != nil {
				return err
			}
			if webhookPort > 0 {
				mgr.GetWebhookServer().Register(configwebhook.Path, &webhook.Admission{Handler: configwebhook.Handler{}})
			}
			check := &admission.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Labels: labels, Workers: admissionWorkers}
			if err := check.SetupWithManager(mgr); err != nil {
				return err
			}
			crmetrics.Registry.MustRegister(&admission.Capacity{Client: mgr.GetClient()})
			if err := (&admission.CheckActivator{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
				return err
			}
			if err := (&admission.PodPinner{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
				return err
			}
			net := &network.Reconciler{Client: mgr.GetClient(), Labels: labels, FlavorNodeLabels: flavorNodeLabels}
			if topologyConfigMap != "" {
				ns, name, ok := strings.Cut(topologyConfigMap, "/")
				if !ok {
					return fmt.Errorf("--topology-configmap %q: want namespace/name", topologyConfigMap)
				}
				net.ConfigMap = types.NamespacedName{Namespace: ns, Name: name}
			}
			if err := net.SetupWithManager(mgr); err != nil {
				return err
			}
			if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
				return err
			}
			if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
				return err
			}
			return mgr.Start(ctrl.SetupSignalHandler())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster config or $KUBECONFIG)")
	fs.BoolVar(&profiling, "profiling", false, "serve Go's profiles (net/http/pprof) under /debug/pprof/ beside the metrics")
	fs.Float32Var(&apiQPS, "kube-api-qps", -1, "client-side limit of API requests per second (negative: none, the API server's priority and fairness applies)")
	fs.IntVar(&apiBurst, "kube-api-burst", 0, "burst of API requests above --kube-api-qps")
	fs.IntVar(&admissionWorkers, "admission-check-workers", 8, "workloads the admission check reconciles at once (at least 1): decisions are made one at a time, their API writes overlap")
	fs.StringVar(&metricsAddr, "metrics-bind-address", "127.0.0.1:8080", `address for Prometheus metrics ("0" turns them off)`)
	fs.StringVar(&probeAddr, "health-probe-bind-address", "127.0.0.1:8081", "address for /healthz and /readyz")
	fs.StringToStringVar(&flavorNodeLabels, "topology-flavor-node-labels", nil, "node labels (key=value,...) of a topology-aware Kueue ResourceFlavor \""+network.FlavorName+"\" to keep in sync (empty: only the Topology)")
	fs.StringVar(&topologyConfigMap, "topology-configmap", "", "namespace/name of a ConfigMap whose topology.yaml places nodes in blocks and racks (default: nodes are already labelled)")
	fs.IntVar(&webhookPort, "webhook-port", 0, "port of the admission webhook that validates gpu.gpudra.dev configs (0: off)")
	fs.StringVar(&webhookHost, "webhook-host", "", "address the webhook listens on (empty: all; tests use 127.0.0.1)")
	fs.StringVar(&webhookCertDir, "webhook-cert-dir", "/tmp/gpudra-webhook-certs", "directory with the webhook's tls.crt and tls.key")
	fs.StringVar(&webhookCertNames, "webhook-self-signed", "", "comma-separated DNS names and IPs: generate a CA and serving certificate for them in --webhook-cert-dir and put the CA into ValidatingWebhookConfiguration "+configwebhook.ConfigurationName)
	fs.StringVar(&labels.Block, "block-label", labels.Block, "node label holding the node's block")
	fs.StringVar(&labels.Rack, "rack-label", labels.Rack, "node label holding the node's rack")
	fs.StringVar(&labels.ToR, "tor-label", labels.ToR, "node label holding the node's top-of-rack switch (default: the rack)")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	return cmd
}

// validateAdmissionCheckWorkers refuses an --admission-check-workers value the admission
// check cannot run with.
func validateAdmissionCheckWorkers(n int) error {
	if n < 1 {
		return fmt.Errorf("--admission-check-workers=%d: want at least 1", n)
	}
	return nil
}

// profilingHandlers are net/http/pprof's handlers, for the metrics server, when on.
func profilingHandlers(on bool) map[string]http.Handler {
	if !on {
		return nil
	}
	return map[string]http.Handler{
		"/debug/pprof/":        http.HandlerFunc(pprof.Index),
		"/debug/pprof/cmdline": http.HandlerFunc(pprof.Cmdline),
		"/debug/pprof/profile": http.HandlerFunc(pprof.Profile),
		"/debug/pprof/symbol":  http.HandlerFunc(pprof.Symbol),
		"/debug/pprof/trace":   http.HandlerFunc(pprof.Trace),
	}
}

// selfSignedWebhookCert makes the webhook's certificate and publishes its CA in the
// webhook configuration, so no cert-manager is needed.
func selfSignedWebhookCert(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, dir, names string) error {
	var dns []string
	var ips []net.IP
	for _, n := range strings.Split(names, ",") {
		if ip := net.ParseIP(strings.TrimSpace(n)); ip != nil {
			ips = append(ips, ip)
		} else if n = strings.TrimSpace(n); n != "" {
			dns = append(dns, n)
		}
	}
	ca, err := configwebhook.WriteSelfSignedCert(dir, dns, ips)
	if err != nil {
		return err
	}
	if err := admissionregistrationv1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	return configwebhook.InjectCABundle(ctx, c, configwebhook.ConfigurationName, ca)
}

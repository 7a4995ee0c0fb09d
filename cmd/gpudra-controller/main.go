// Command gpudra-controller is gpudra's cluster-side controller: the Kueue admission check
// "gpudra.dev/topology" that places whole gangs on racks with the real DRA allocator, the
// node topology labels, the webhook that validates gpu.gpudra.dev configs, (--hami-pods,
// feature gate HAMiPods) the webhook that rewrites pods written for HAMi into pods with
// claims, (gate JobDependencies) the Jobs that wait at a Kueue admission gate for
// others to succeed, (gate LargeJobsFirst) the bands that order large jobs first, (gate
// Defragmentation) the moves that make room for a Workload whose gang does not fit, and
// (gate DataPrewarm) the DataLoads that warm a queued Workload's datasets.
package main

import (
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/defrag/mover"
	"github.com/gpudra/gpudra/internal/buildinfo"
	"github.com/gpudra/gpudra/internal/features"
	"github.com/gpudra/gpudra/internal/logoptions"
	"github.com/gpudra/gpudra/queueing/admission"
	"github.com/gpudra/gpudra/queueing/dependencies"
	"github.com/gpudra/gpudra/queueing/largefirst"
	"github.com/gpudra/gpudra/queueing/network"
	"github.com/gpudra/gpudra/queueing/prewarm"
	"github.com/gpudra/gpudra/topology"
)

func main() {
	err := newCommand().Execute()
	klog.Flush()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpudra-controller:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	o := options{labels: topology.DefaultLabelKeys}
	cmd := &cobra.Command{
		Use:           "gpudra-controller",
		Short:         "gpudra's cluster-side controller (Kueue admission check gpudra.dev/topology)",
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if buildinfo.PrintVersion(cmd.OutOrStdout(), cmd.Flags(), cmd.Name()) {
				return nil
			}
			if err := o.validate(); err != nil {
				return err
			}
			if err := logoptions.ValidateAndApply(o.logging); err != nil {
				return err
			}
			return run(o)
		},
	}
	o.addFlags(cmd.Flags())
	return cmd
}

// run starts the manager with every controller and serves until a signal stops it.
func run(o options) error {
	ctrl.SetLogger(klog.NewKlogr())
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, batchv1.AddToScheme, policyv1.AddToScheme, resourceapi.AddToScheme, kueue.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	cfg, err := ctrl.GetConfig()
	if o.kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	}
	if err != nil {
		return fmt.Errorf("kubernetes client config: %w", err)
	}
	// The same client rate whichever way the config was loaded (client-go's default
	// for a kubeconfig file is 5 QPS, which alone capped admissions at ~1.6/s).
	cfg.QPS, cfg.Burst = o.apiQPS, o.apiBurst
	ctx := ctrl.SetupSignalHandler()
	if o.webhookSelfSigned != "" {
		if err := selfSignedWebhookCert(ctx, cfg, scheme, o.webhookCertDir, o.webhookSelfSigned, o.mutatingWebhooks()); err != nil {
			return err
		}
	}
	mgr, err := ctrl.NewManager(cfg, o.managerOptions(scheme))
	if err != nil {
		return err
	}
	if o.webhookPort > 0 {
		if err := o.serveWebhook(mgr); err != nil {
			return err
		}
	}
	// Every controller below is leader-elected (controller-runtime's default for
	// controllers): with --leader-elect, only the Lease holder decides admissions and labels
	// nodes; the other replicas keep their caches warm to take over.
	if o.enabled(features.TopologyAdmissionCheck) {
		if err := setupAdmissionCheck(mgr, o); err != nil {
			return err
		}
	} else {
		klog.InfoS("The Kueue admission check is off: Workloads waiting for it stay pending", "admissionCheck", api.AdmissionCheckController, "featureGate", features.TopologyAdmissionCheck)
	}
	if o.enabled(features.Defragmentation) {
		m := &mover.Mover{Client: mgr.GetClient(), Labels: o.labels, Interval: o.defragInterval, EvictionsPerMinute: o.defragEvictionsPerMinute, MaxEvictions: o.defragMaxEvictions}
		if err := mgr.Add(m); err != nil {
			return err
		}
	}
	if o.enabled(features.JobDependencies) {
		deps := &dependencies.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("gpudra-controller")}
		if err := deps.SetupWithManager(mgr); err != nil {
			return err
		}
	}
	if o.enabled(features.DataPrewarm) {
		if err := setupPrewarm(mgr, cfg, o); err != nil {
			return err
		}
	}
	if bands := o.largeJobsFirst(); bands != nil {
		ageing := &largefirst.Ageing{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("gpudra-controller"), Bands: bands, MaxWait: o.largeJobsFirstMaxWait}
		if err := ageing.SetupWithManager(mgr); err != nil {
			return err
		}
	}
	topologyConfigMap, _ := o.topologyConfigMapKey()
	net := &network.Reconciler{Client: mgr.GetClient(), Labels: o.labels, FlavorNodeLabels: o.flavorNodeLabels, ConfigMap: topologyConfigMap}
	if err := net.SetupWithManager(mgr); err != nil {
		return err
	}
	if o.dashboardAddr != "" {
		if err := mgr.Add(dashboard{addr: o.dashboardAddr, certDir: o.dashboardCertDir, cfg: cfg, httpClient: mgr.GetHTTPClient(), cache: mgr.GetCache(), labels: o.labels,
			jobs: o.enabled(features.JobDependencies)}); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// setupAdmissionCheck adds the admission check, its activator, its capacity metrics and
// the pod pinning that carries out its placements to mgr.
func setupAdmissionCheck(mgr ctrl.Manager, o options) error {
	check := &admission.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Labels: o.labels, Workers: o.admissionWorkers,
		Recorder: mgr.GetEventRecorder("gpudra-controller")}
	if err := check.SetupWithManager(mgr); err != nil {
		return err
	}
	crmetrics.Registry.MustRegister(&admission.Capacity{Client: mgr.GetClient()})
	if err := (&admission.CheckActivator{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return err
	}
	return (&admission.PodPinner{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("gpudra-controller")}).SetupWithManager(mgr)
}

// setupPrewarm adds the controller that warms queued Workloads' datasets to mgr.
func setupPrewarm(mgr ctrl.Manager, cfg *rest.Config, o options) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("discovery client: %w", err)
	}
	r := &prewarm.Reconciler{Client: mgr.GetClient(), Dynamic: dyn, Served: prewarm.Served(disc),
		Recorder: mgr.GetEventRecorder("gpudra-controller"), MaxDataLoads: o.prewarmMaxDataLoads}
	return r.SetupWithManager(mgr)
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

//go:build ignore

// Command trainer runs Kubeflow Trainer's controllers (TrainJob, TrainingRuntime,
// ClusterTrainingRuntime) and webhooks for the gpudra lab, out of cluster: its webhook server
// binds 127.0.0.1 and serves a certificate the lab issues from a folder the lab names.
// Trainer's own command takes the webhook server's host and port from its configuration but
// not its certificate folder: it serves from controller-runtime's fixed folder under /tmp,
// where its certificate rotation writes, which a shared lab machine cannot give it. Its
// metrics, leader election and status server are off.
//
// Trainer pins other k8s.io versions than gpudra, so this file is not part of gpudra's
// module (the ignore constraint): lab/toolchain.sh builds it in a module of its own with the
// Trainer version it names.
package main

import (
	"flag"
	"fmt"
	"os"

	apiruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlpkg "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	configapi "github.com/kubeflow/trainer/v2/pkg/apis/config/v1alpha1"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/kubeflow/trainer/v2/pkg/controller"
	runtimecore "github.com/kubeflow/trainer/v2/pkg/runtime/core"
	"github.com/kubeflow/trainer/v2/pkg/webhooks"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "trainer:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		webhookPort         int
		certDir, healthAddr string
	)
	flag.IntVar(&webhookPort, "webhook-port", 0, "port of the webhook server on 127.0.0.1")
	flag.StringVar(&certDir, "cert-dir", "", "folder holding the webhook server's tls.crt and tls.key")
	flag.StringVar(&healthAddr, "health-probe-bind-address", "127.0.0.1:0", "address of /healthz and /readyz")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	if webhookPort <= 0 || certDir == "" {
		return fmt.Errorf("--webhook-port and --cert-dir are required")
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	scheme := apiruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(configapi.AddToScheme(scheme))
	utilruntime.Must(trainer.AddToScheme(scheme))
	utilruntime.Must(jobsetv1alpha2.AddToScheme(scheme))
	utilruntime.Must(schedulerpluginsv1alpha1.AddToScheme(scheme))
	utilruntime.Must(volcanov1beta1.AddToScheme(scheme))
	// Trainer's defaults; only the runtimes read it here.
	var cfg configapi.Configuration
	scheme.Default(&cfg)

	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		WebhookServer:          webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: webhookPort, CertDir: certDir}),
		HealthProbeBindAddress: healthAddr,
	})
	if err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	runtimes, err := runtimecore.New(ctx, mgr.GetClient(), mgr.GetFieldIndexer(), &cfg)
	if err != nil {
		return fmt.Errorf("Trainer's runtimes: %w", err)
	}
	if name, err := controller.SetupControllers(mgr, runtimes, ctrlpkg.Options{}); err != nil {
		return fmt.Errorf("the %s controller: %w", name, err)
	}
	if name, err := webhooks.Setup(mgr, runtimes); err != nil {
		return fmt.Errorf("the %s webhook: %w", name, err)
	}
	return mgr.Start(ctx)
}

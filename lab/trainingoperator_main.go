//go:build ignore

// Command training-operator runs the Kubeflow training operator's PyTorchJob and TFJob
// controllers and validating webhooks for the gpudra lab, out of cluster: its webhook server
// binds 127.0.0.1 and serves a certificate the lab issues from a folder the lab names. The
// operator's own command binds every interface and rotates its certificate into a fixed
// /tmp folder, which a shared lab machine cannot give it.
//
// The operator pins other k8s.io versions than gpudra, so this file is not part of gpudra's
// module (the ignore constraint): lab/toolchain.sh builds it in a module of its own with the
// operator's version it names.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/kubeflow/training-operator/pkg/config"
	controllerv1 "github.com/kubeflow/training-operator/pkg/controller.v1"
	"github.com/kubeflow/training-operator/pkg/controller.v1/common"
	"github.com/kubeflow/training-operator/pkg/webhooks"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "training-operator:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		webhookPort         int
		certDir, healthAddr string
		namespace, kinds    string
		threads             int
	)
	flag.IntVar(&webhookPort, "webhook-port", 0, "port of the webhook server on 127.0.0.1")
	flag.StringVar(&certDir, "cert-dir", "", "folder holding the webhook server's tls.crt and tls.key")
	flag.StringVar(&healthAddr, "health-probe-bind-address", "127.0.0.1:0", "address of /healthz and /readyz")
	flag.StringVar(&namespace, "namespace", "", "the only namespace to watch (empty: all)")
	flag.StringVar(&kinds, "kinds", "PyTorchJob", "comma-separated job kinds to run: "+strings.Join(supported(), ", "))
	flag.IntVar(&threads, "controller-threads", 1, "worker threads per controller")
	flag.StringVar(&config.Config.PyTorchInitContainerImage, "pytorch-init-container-image", config.PyTorchInitContainerImageDefault, "image of a PyTorchJob worker's init container")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	if webhookPort <= 0 || certDir == "" {
		return fmt.Errorf("--webhook-port and --cert-dir are required")
	}
	config.Config.PyTorchInitContainerTemplateFile = config.PyTorchInitContainerTemplateFileDefault
	config.Config.PyTorchInitContainerMaxTries = config.PyTorchInitContainerMaxTriesDefault
	config.Config.MPIKubectlDeliveryImage = config.MPIKubectlDeliveryImageDefault
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(kubeflowv1.AddToScheme(scheme))
	var cacheOpts cache.Options
	if namespace != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{namespace: {}}
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		WebhookServer:          webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: webhookPort, CertDir: certDir}),
		HealthProbeBindAddress: healthAddr,
		Cache:                  cacheOpts,
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
	for _, kind := range strings.Split(kinds, ",") {
		setup, ok := kindOf(strings.TrimSpace(kind))
		if !ok {
			return fmt.Errorf("--kinds: %q is not one of %s", kind, strings.Join(supported(), ", "))
		}
		if err := controllerv1.SupportedSchemeReconciler[setup](mgr, common.GenNonGangSchedulerSetupFunc(), threads); err != nil {
			return fmt.Errorf("the %s controller: %w", setup, err)
		}
		if err := webhooks.SupportedSchemeWebhook[setup](mgr); err != nil {
			return fmt.Errorf("the %s webhook: %w", setup, err)
		}
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}

// supported are the kinds with both a controller and a webhook.
func supported() []string {
	var out []string
	for k := range controllerv1.SupportedSchemeReconciler {
		if _, ok := webhooks.SupportedSchemeWebhook[k]; ok {
			out = append(out, k)
		}
	}
	return out
}

func kindOf(name string) (string, bool) {
	for _, k := range supported() {
		if strings.EqualFold(k, name) {
			return k, true
		}
	}
	return "", false
}

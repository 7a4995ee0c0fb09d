// Command gpudra-controller is gpudra's cluster-side controller: the Kueue admission
// check "gpudra.dev/topology" that places whole gangs on racks with the real DRA allocator.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

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
	labels := topology.DefaultLabelKeys
	cmd := &cobra.Command{
		Use:           "gpudra-controller",
		Short:         "gpudra's cluster-side controller (Kueue admission check gpudra.dev/topology)",
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
			mgr, err := ctrl.NewManager(cfg, ctrl.Options{
				Scheme:                 scheme,
				Metrics:                metricsserver.Options{BindAddress: metricsAddr},
				HealthProbeBindAddress: probeAddr,
			})
			if err != nil {
				return err
			}
			if err := (&admission.Reconciler{Client: mgr.GetClient(), Labels: labels}).SetupWithManager(mgr); err != nil {
				return err
			}
			if err := (&admission.PodPinner{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
				return err
			}
			net := &network.Reconciler{Client: mgr.GetClient(), Labels: labels}
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
	fs.StringVar(&metricsAddr, "metrics-bind-address", "127.0.0.1:8080", `address for Prometheus metrics ("0" turns them off)`)
	fs.StringVar(&probeAddr, "health-probe-bind-address", "127.0.0.1:8081", "address for /healthz and /readyz")
	fs.StringVar(&topologyConfigMap, "topology-configmap", "", "namespace/name of a ConfigMap whose topology.yaml places nodes in blocks and racks (default: nodes are already labelled)")
	fs.StringVar(&labels.Block, "block-label", labels.Block, "node label holding the node's block")
	fs.StringVar(&labels.Rack, "rack-label", labels.Rack, "node label holding the node's rack")
	fs.StringVar(&labels.ToR, "tor-label", labels.ToR, "node label holding the node's top-of-rack switch (default: the rack)")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	return cmd
}

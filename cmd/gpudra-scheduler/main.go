// Command gpudra-scheduler is kube-scheduler v1.37 with gpudra's plugins registered:
// GPUFragmentation, a Score plugin that places GPU pods where they fragment GPUs least
// (the policy `gpudra sim` measures on the Alibaba GPU traces), and DataLocality, a Score
// plugin that prefers the nodes caching the datasets a pod reads. It takes kube-scheduler's
// flags; enable the plugins in a profile of its --config (deployments/scheduler).
package main

import (
	"os"

	"github.com/spf13/cobra"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/cli"
	basecompatibility "k8s.io/component-base/compatibility"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	baseversion "k8s.io/component-base/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/gpudra/gpudra/internal/buildinfo"
	"github.com/gpudra/gpudra/internal/logoptions"
	"github.com/gpudra/gpudra/scheduler/datalocality"
	"github.com/gpudra/gpudra/scheduler/fragmentation"
)

func main() {
	os.Exit(cli.Run(newCommand()))
}

// newCommand is kube-scheduler's command with gpudra's plugins, reporting gpudra's version.
func newCommand() *cobra.Command {
	registerKubeVersion()
	cmd := app.NewSchedulerCommand(app.WithPlugin(fragmentation.Name, fragmentation.New),
		app.WithPlugin(datalocality.Name, datalocality.New))
	run := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		// Before kube-scheduler's own --version, which names the binary Kubernetes.
		if buildinfo.PrintVersion(cmd.OutOrStdout(), cmd.Flags(), "gpudra-scheduler") {
			return nil
		}
		// kube-scheduler's own check exits with "Unsupported log format", naming none.
		if f := cmd.Flags().Lookup("logging-format"); f != nil {
			if err := logoptions.ValidateFormat(f.Value.String()); err != nil {
				return err
			}
		}
		return run(cmd, args)
	}
	return cmd
}

// registerKubeVersion gives kube-scheduler the Kubernetes version it is built from.
// k8s.io/apiserver registers one at init, its binary version read from
// k8s.io/component-base/version, which holds gpudra's version (-ldflags -X ...gitVersion):
// kube-scheduler's feature gates and emulation version would then follow gpudra's release
// numbers instead of Kubernetes 1.37's (with gpudra v0.3.0, features emulate "0.3" and the
// JSON log format is refused as gated). This replaces it with the version a build of
// kube-scheduler without linker flags has: DefaultKubeBinaryVersion, emulated and compatible
// down to 3 minor releases back.
func registerKubeVersion() {
	binary := version.MustParse(baseversion.DefaultKubeBinaryVersion)
	floor := binary.SubtractMinor(3)
	registry := compatibility.DefaultComponentGlobalsRegistry
	registry.Reset()
	utilruntime.Must(registry.Register(basecompatibility.DefaultKubeComponent,
		basecompatibility.NewEffectiveVersion(binary, false, floor, floor), utilfeature.DefaultMutableFeatureGate))
}

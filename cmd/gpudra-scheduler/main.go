// Command gpudra-scheduler is kube-scheduler v1.37 with gpudra's plugins registered:
// GPUFragmentation, a Score plugin that places GPU pods where they fragment GPUs least
// (the policy `gpudra sim` measures on the Alibaba GPU traces). It takes kube-scheduler's
// flags; enable the plugin in a profile of its --config (deployments/scheduler).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/gpudra/gpudra/scheduler/fragmentation"
)

func main() {
	command := app.NewSchedulerCommand(app.WithPlugin(fragmentation.Name, fragmentation.New))
	os.Exit(cli.Run(command))
}

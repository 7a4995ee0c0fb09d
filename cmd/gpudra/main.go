// Command gpudra is gpudra's command-line tool: inspect a node's GPUs and the
// ResourceSlices it publishes, and run the local Kubernetes lab.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{
		Use:           "gpudra",
		Short:         "gpudra: NVIDIA GPUs as Kubernetes DRA devices",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newInspectCommand(), newLabCommand(), newExplainCommand(), newSimCommand())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "gpudra:", err)
		os.Exit(1)
	}
}

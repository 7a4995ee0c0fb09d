// Command gpudra is gpudra's command-line tool: inspect a node's GPUs and the
// ResourceSlices it publishes, and run the local Kubernetes lab.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpudra/gpudra/internal/buildinfo"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "gpudra:", err)
		os.Exit(exitCode(err))
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "gpudra",
		Short:         "gpudra: NVIDIA GPUs as Kubernetes DRA devices",
		SilenceUsage:  true,
		SilenceErrors: true,
		// --version prints what `gpudra version` does (--version=raw: every field).
		RunE: func(cmd *cobra.Command, _ []string) error {
			if buildinfo.PrintVersion(cmd.OutOrStdout(), cmd.Flags(), "gpudra") {
				return nil
			}
			return cmd.Help()
		},
	}
	buildinfo.AddVersionFlag(root.Flags())
	root.AddCommand(newInspectCommand(), newLabCommand(), newExplainCommand(), newDashboardCommand(), newSimCommand(), newDefragCommand(), newConvertCommand(), newValidateCommand(), newVersionCommand())
	setDisplayName(root, displayName(os.Args[0]))
	return root
}

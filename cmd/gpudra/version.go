package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gpudra/gpudra/internal/buildinfo"
)

func newVersionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "print the version, git commit and build date this binary was built from",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch output {
			case "":
				fmt.Fprintln(cmd.OutOrStdout(), buildinfo.String("gpudra"))
			case "json":
				out, err := json.MarshalIndent(buildinfo.Get(), "", "  ")
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), string(out))
			default:
				return fmt.Errorf("-o %q: accepted values are json (or none: one line)", output)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "json: every field (gitVersion, gitCommit, buildDate, goVersion, ...)")
	return cmd
}

package main

import (
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
)

// pluginBinary is the name kubectl finds the tool under on $PATH to run it as
// `kubectl gpudra` (ln -s gpudra kubectl-gpudra).
const pluginBinary = "kubectl-gpudra"

// displayName is how usage names the tool invoked as argv0: "kubectl gpudra" for the
// kubectl plugin, else "gpudra".
func displayName(argv0 string) string {
	base := strings.TrimSuffix(filepath.Base(argv0), ".exe")
	if base == pluginBinary {
		return "kubectl gpudra"
	}
	return "gpudra"
}

// exampleCommand matches an example line's command name.
var exampleCommand = regexp.MustCompile(`(?m)^(\s*(?:\$ )?)gpudra\b`)

// setDisplayName names the tool in every command's usage line, help and examples.
func setDisplayName(root *cobra.Command, name string) {
	if root.Annotations == nil {
		root.Annotations = map[string]string{}
	}
	root.Annotations[cobra.CommandDisplayNameAnnotation] = name
	if name == root.Name() {
		return
	}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.Example = exampleCommand.ReplaceAllString(c.Example, "${1}"+name)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

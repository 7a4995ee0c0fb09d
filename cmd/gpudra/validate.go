package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpudra/gpudra/driver/nvmlsim"
	"github.com/gpudra/gpudra/internal/validate"
	"github.com/gpudra/gpudra/lab"
)

// exitError sets the exit status of a failed command: 1 when what it checked is wrong,
// 2 when it was used wrongly.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError is a command-line mistake (exit status 2).
func usageError(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

// exitCode is the exit status for err: 0 for none, 1 unless err says otherwise.
func exitCode(err error) int {
	var e *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return e.code
	}
	return 1
}

func newValidateCommand() *cobra.Command {
	var files []string
	var kind, profile, layout string
	cmd := &cobra.Command{
		Use:   "validate -f FILE|- [-f FILE...]",
		Short: "Check gpudra's files offline: claims, DeviceClasses, MIG layouts, topology and lab files",
		Long: `Validate checks, without a cluster, the files users write for gpudra, with the parsers and
validation the components run:

  ResourceClaims, ResourceClaimTemplates and DeviceClasses (resource.k8s.io/v1): strict
    fields, names, requests and their references, CEL selectors, and every
    gpu.gpudra.dev config as the admission webhook checks it (a config may also stand
    alone as a gpu.gpudra.dev/v1alpha1 document); other Kubernetes objects are listed,
    not checked
  MIG layout files (version, mig-configs) as the kubelet plugin parses them; with
    --profile, against that simulated node: device indexes, MIG profiles, and whether
    each selected GPU can hold its layout (--layout: only the layout a node's label names)
  network topology files (blocks of racks of nodes) as the controller parses them
  lab files (lab.gpudra.dev/v1alpha1 Lab)

A file may hold many YAML documents (or be JSON); each document's kind comes from its
content unless --kind names it. Each problem is one line, FILE:doc N: field.path: message.
The exit status is 0 when every file is valid, 1 when any is not, 2 on a usage error.`,
		Example: `  gpudra validate -f deployments/examples/gpu-share.yaml
  gpudra validate -f mig-layouts.yaml --profile=dgx-h100
  helm get values gpudra -o json | jq .kubeletPlugin.migLayouts | gpudra validate -f - --kind=mig-layouts`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError("unexpected arguments %s: name files with -f", strings.Join(args, " "))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return usageError("-f: required: a file to check, or - for standard input")
			}
			opts := validate.Options{Kind: kind, Layout: layout, ParseLab: func(data []byte) error {
				_, err := lab.ParseFile(data)
				return err
			}}
			if kind != "" && !slices.Contains(validate.Kinds, kind) {
				return usageError("--kind=%q: accepted values are %s", kind, strings.Join(validate.Kinds, ", "))
			}
			if profile != "" {
				node, err := validate.OpenNode(profile)
				if err != nil {
					return usageError("--profile=%s: %v", profile, err)
				}
				opts.Node = node
			}
			bad := 0
			for _, file := range files {
				name, data, err := readInput(cmd.InOrStdin(), file)
				if err != nil {
					return usageError("-f %s: %v", file, err)
				}
				res := validate.Check(data, opts)
				for _, p := range res.Problems {
					fmt.Fprintln(cmd.OutOrStdout(), p.Format(name))
				}
				if len(res.Problems) > 0 {
					bad++
					continue
				}
				fmt.Fprintln(cmd.ErrOrStderr(), summary(name, res))
			}
			if bad > 0 {
				return &exitError{code: 1, err: fmt.Errorf("%d of %d files are not valid", bad, len(files))}
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "file to check (YAML or JSON, many documents), - for standard input; repeat for more files")
	cmd.Flags().StringVar(&kind, "kind", validate.KindAuto, "what every document is: "+strings.Join(validate.Kinds, ", ")+" (auto: from each document's content)")
	cmd.Flags().StringVar(&profile, "profile", "", "check MIG layouts against this simulated node: a built-in profile ("+strings.Join(nvmlsim.BuiltinNames(), ", ")+") or a profile file")
	cmd.Flags().StringVar(&layout, "layout", "", "the MIG layout a layout file must have; with --profile, the only one checked against the node")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: 2, err: err} })
	return cmd
}

// readInput reads file, or standard input for "-", up to validate.MaxFileBytes.
func readInput(stdin io.Reader, file string) (name string, data []byte, err error) {
	r := stdin
	name = file
	if file == "-" {
		name = "<stdin>"
	} else {
		f, err := os.Open(file)
		if err != nil {
			return name, nil, err
		}
		defer f.Close()
		r = f
	}
	data, err = io.ReadAll(io.LimitReader(r, validate.MaxFileBytes+1))
	if err != nil {
		return name, nil, err
	}
	if len(data) > validate.MaxFileBytes {
		return name, nil, fmt.Errorf("larger than the %d MiB limit", validate.MaxFileBytes>>20)
	}
	return name, data, nil
}

// summary says what a valid file held: "FILE: valid: 2 ResourceClaim, 1 mig-layouts (1
// Namespace not checked)".
func summary(name string, res validate.Result) string {
	var checked, other []string
	for _, d := range res.Documents {
		if d.Checked {
			checked = append(checked, d.Kind)
		} else {
			other = append(other, d.Kind)
		}
	}
	s := fmt.Sprintf("%s: valid: %s", name, tally(checked))
	if len(other) > 0 {
		s += fmt.Sprintf(" (not gpudra's, not checked: %s)", tally(other))
	}
	return s
}

// tally counts kinds in first-seen order: "2 ResourceClaim, 1 DeviceClass".
func tally(kinds []string) string {
	if len(kinds) == 0 {
		return "nothing gpudra checks"
	}
	n := map[string]int{}
	var order []string
	for _, k := range kinds {
		if n[k] == 0 {
			order = append(order, k)
		}
		n[k]++
	}
	out := make([]string, len(order))
	for i, k := range order {
		out[i] = fmt.Sprintf("%d %s", n[k], k)
	}
	return strings.Join(out, ", ")
}

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// runGpudra runs the gpudra command line with args and stdin; it returns the exit status
// main would give, the outputs, and what main prints of the error.
func runGpudra(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := newRootCommand()
	var out, errOut bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err := cmd.Execute()
	if err != nil {
		errOut.WriteString("gpudra: " + err.Error() + "\n")
	}
	return exitCode(err), out.String(), errOut.String()
}

func TestValidateExitStatus(t *testing.T) {
	data := filepath.Join("..", "..", "internal", "validate", "testdata")
	bad := filepath.Join(data, "invalid-claims.yaml")
	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
		code  int
		// out is a substring of standard output (the problems) or error output.
		out string
	}{
		{name: "a valid file exits 0 and says what it held", args: []string{"-f", filepath.Join(data, "valid-claims.yaml")}, code: 0, out: "valid: 1 ResourceClaim, 1 ResourceClaimTemplate, 1 DeviceClass (not gpudra's, not checked: 1 Namespace, 1 Inventory)"},
		{name: "an invalid file exits 1 with a line per problem", args: []string{"-f", bad}, code: 1, out: bad + ":doc 2: spec.devices.config[0].opaque.parameters.sharing.strategy: Unsupported value"},
		{name: "standard input is read with -f -", args: []string{"-f", "-"}, stdin: "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {strategy: Nope}\n", code: 1, out: "<stdin>:doc 1: sharing.strategy: Unsupported value: \"Nope\""},
		{name: "valid standard input exits 0", args: []string{"-f", "-"}, stdin: "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: MigConfig\n", code: 0, out: "<stdin>: valid: 1 MigConfig"},
		{name: "one invalid file of two exits 1", args: []string{"-f", filepath.Join(data, "valid-topology.yaml"), "-f", bad}, code: 1, out: "1 of 2 files are not valid"},
		{name: "a lab file is checked by the lab's parser", args: []string{"-f", filepath.Join("..", "..", "deployments", "lab", "lab.yaml")}, code: 0, out: "valid: 1 lab"},
		{name: "a broken lab file names the field", args: []string{"-f", "-"}, stdin: "apiVersion: lab.gpudra.dev/v1alpha1\nkind: Lab\nscheduler: volcano\nblocks: []\n", code: 1, out: "<stdin>:doc 1: scheduler: Unsupported value: \"volcano\""},
		{name: "layouts are checked against a named profile", args: []string{"-f", filepath.Join(data, "invalid-layouts-node.yaml"), "--profile=dgx-h100", "--layout=past-the-node"}, code: 1, out: "mig-configs.past-the-node[0].devices[0]: node dgx-h100 has no GPU 8"},
		{name: "no -f is a usage error", args: nil, code: 2, out: "-f: required"},
		{name: "a missing file is a usage error", args: []string{"-f", filepath.Join(data, "no-such-file.yaml")}, code: 2, out: "no such file"},
		{name: "an unknown kind is a usage error", args: []string{"-f", "-", "--kind=claims"}, code: 2, out: "accepted values are auto, object, mig-layouts, topology, lab"},
		{name: "an unknown profile is a usage error", args: []string{"-f", "-", "--profile=dgx-z900"}, code: 2, out: "--profile=dgx-z900"},
		{name: "an unknown flag is a usage error", args: []string{"-f", "-", "--strict"}, code: 2, out: "unknown flag"},
		{name: "a positional argument is a usage error", args: []string{"claims.yaml"}, code: 2, out: "name files with -f"},
		{name: "standard input over the limit is a usage error", args: []string{"-f", "-"}, stdin: strings.Repeat("#", 4<<20+1), code: 2, out: "larger than the 4 MiB limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runGpudra(t, tc.stdin, append([]string{"validate"}, tc.args...)...)
			if code != tc.code {
				t.Errorf("exit status %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, stdout, stderr)
			}
			if all := stdout + stderr; !strings.Contains(all, tc.out) {
				t.Errorf("output lacks %q:\n%s", tc.out, all)
			}
		})
	}
}

// Every example and DeviceClass the project ships validates clean.
func TestShippedManifestsValidate(t *testing.T) {
	var files []string
	for _, pattern := range []string{"examples/*.yaml", "deviceclasses/*.yaml", "lab/*.yaml"} {
		m, err := filepath.Glob(filepath.Join("..", "..", "deployments", pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 10 {
		t.Fatalf("found %d files", len(files))
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runGpudra(t, "", "validate", "-f", f)
		if code != 0 {
			t.Errorf("%s: exit status %d:\n%s%s", f, code, stdout, stderr)
		}
	}
}

// The chart's MIG layouts parse, and an H100 node can hold the H100 layouts.
func TestChartMIGLayoutsValidate(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "deployments", "helm", "gpudra", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		KubeletPlugin struct {
			MIGLayouts map[string]any `json:"migLayouts"`
		} `json:"kubeletPlugin"`
	}
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	layouts, err := yaml.Marshal(values.KubeletPlugin.MIGLayouts)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"every layout parses", nil},
		{"an H100 node holds the H100 layout", []string{"--profile=dgx-h100", "--layout=all-1g.10gb"}},
		{"an H100 node holds MIG enabled without instances", []string{"--profile=dgx-h100", "--layout=all-enabled"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runGpudra(t, string(layouts), append([]string{"validate", "-f", "-"}, tc.args...)...)
			if code != 0 {
				t.Errorf("exit status %d:\n%s%s", code, stdout, stderr)
			}
		})
	}
}

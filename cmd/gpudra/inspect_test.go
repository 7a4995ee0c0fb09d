package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpudra/gpudra/driver/kfdsim"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	file := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run with -update to accept):\n%s", file, got)
	}
}

// inspect --sysfs reads a captured tree (the GPU node of a gfx942 machine, see
// driver/kfd's tests) and prints what the node would publish.
func TestInspectCapturedTree(t *testing.T) {
	dir := filepath.Join("..", "..", "driver", "kfd", "testdata", "mi300-cpx-capture")
	for _, o := range []string{"text", "yaml"} {
		code, out, errOut := runGpudra(t, "", "inspect", "--sysfs", dir, "--node-name", "amd-1", "-o", o)
		if code != 0 {
			t.Fatalf("-o %s: exit %d: %s", o, code, errOut)
		}
		golden(t, "inspect-mi300-capture."+o, out)
	}
}

// A simulated tree written to a directory (with its symlinks) reads the same through
// --sysfs as the simulated node does through --kfd=sim:, NVIDIA GPUs aside.
func TestInspectSysfsDirectoryMatchesTheSimulatedNode(t *testing.T) {
	p, err := kfdsim.Load("mi300x-8")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := kfdsim.WriteDir(p.Tree("amd-1"), dir); err != nil {
		t.Fatal(err)
	}
	_, fromDir, errOut := runGpudra(t, "", "inspect", "--sysfs", dir, "--node-name", "amd-1", "-o", "yaml")
	_, fromSim, _ := runGpudra(t, "", "inspect", "--kfd=sim:mi300x-8", "--node-name", "amd-1", "-o", "yaml")
	if fromDir == "" || fromDir != fromSim {
		t.Fatalf("--sysfs of the written tree (%s) differs from --kfd=sim:mi300x-8:\n%s\n---\n%s", errOut, fromDir, fromSim)
	}
	_, text, _ := runGpudra(t, "", "inspect", "--kfd=sim:mixed-l40s-mi210", "--node-name", "mixed-1")
	golden(t, "inspect-mixed.text", text)
}

func TestInspectKFDFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--kfd=rocm"}, `accepted values are "" (none), "sysfs" or "sim:<profile>"`},
		{[]string{"--kfd=sim:mi999"}, "mi300x-8"},
		{[]string{"--sysfs", "/nonexistent"}, "--sysfs=/nonexistent: not a directory"},
		{[]string{"--sysfs", t.TempDir()}, "no KFD topology"},
	} {
		code, _, errOut := runGpudra(t, "", append([]string{"inspect"}, tc.args...)...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("inspect %v: exit %d, %q; want an error mentioning %q", tc.args, code, errOut, tc.want)
		}
	}
}

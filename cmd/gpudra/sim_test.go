package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gpudra sim needs no trace files on disk: from a folder outside the repository it replays the
// embedded default trace, says how far it is, and writes each replay's line to runs.csv as the
// replay ends, beside the tables, with the upper bound next to the policies.
func TestSimReplaysTheEmbeddedTracesFromAnyDirectory(t *testing.T) {
	t.Chdir(t.TempDir())
	cmd := newSimCommand()
	var stderr, stdout bytes.Buffer
	cmd.SetErr(&stderr)
	cmd.SetOut(&stdout)
	cmd.SetArgs([]string{"--traces=default", "--modes=none", "--policies=dotprod", "--seeds=42,43", "--parallel=1", "--out=out"})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("gpudra sim: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{"[1/2, ", "[2/2, ", " left] default"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("progress does not say %q:\n%s", want, stderr.String())
		}
	}
	runs, err := os.ReadFile(filepath.Join("out", "runs.csv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(runs)), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[1], "default,none,DotProd,42,") || !strings.HasPrefix(lines[2], "default,none,DotProd,43,") ||
		!strings.HasPrefix(lines[3], "default,none,upper bound,42,") {
		t.Errorf("runs.csv:\n%s", runs)
	}
	// The table puts the bound beside the policy: DotProd is under it.
	if !strings.Contains(stdout.String(), "| DotProd | upper bound |") {
		t.Errorf("table has no upper bound column:\n%s", stdout.String())
	}
	for _, f := range []string{"table.csv", "table.md", "curves.csv", "default-none.svg"} {
		if _, err := os.Stat(filepath.Join("out", f)); err != nil {
			t.Error(err)
		}
	}
}

func TestSimRefusesUnknownTracesNamingTheEmbeddedOnes(t *testing.T) {
	t.Chdir(t.TempDir())
	cmd := newSimCommand()
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetArgs([]string{"--traces=nosuch", "--out=out"})
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), `"nosuch" not in the embedded Alibaba traces`) || !strings.Contains(err.Error(), "gpushare40") {
		t.Errorf("error %v should name the trace and the accepted ones", err)
	}
}

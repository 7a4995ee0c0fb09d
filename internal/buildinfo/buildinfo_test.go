package buildinfo

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
)

func TestVersionIsSemanticFromAnyDescription(t *testing.T) {
	for describe, want := range map[string]string{
		"v1.2.3":                  "v1.2.3",
		"v1.2.3-4-gabcdef0-dirty": "v1.2.3-4-gabcdef0-dirty",
		"abcdef0":                 "v0.0.0-abcdef0",
		"abcdef0-dirty\n":         "v0.0.0-abcdef0-dirty",
		"":                        "v0.0.0-dev",
	} {
		if got := Version(describe); got != want {
			t.Errorf("Version(%q) = %q, want %q", describe, got, want)
		}
	}
}

func TestLinkerFlagsLeaveUnknownFieldsOut(t *testing.T) {
	got := LinkerFlags(Source{Version: "v1.2.3", Commit: "abc", Date: "2026-01-02T03:04:05Z"})
	want := "-X k8s.io/component-base/version.gitVersion=v1.2.3 -X k8s.io/component-base/version.gitCommit=abc -X k8s.io/component-base/version.buildDate=2026-01-02T03:04:05Z"
	if got != want {
		t.Errorf("LinkerFlags = %q, want %q", got, want)
	}
}

// TestLinkerFlagsSetWhatGetReports links a program with LinkerFlags and runs it: the
// variables the flags name are the ones Get reads.
func TestLinkerFlagsSetWhatGetReports(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	bin := filepath.Join(t.TempDir(), "printversion")
	src := Source{Version: "v1.2.3-rc.1", Commit: "0123456789abcdef", TreeState: "dirty", Date: "2026-01-02T03:04:05Z"}
	build := exec.Command("go", "build", "-ldflags", LinkerFlags(src), "-o", bin, "./testdata/printversion")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "printversion v1.2.3-rc.1 (commit 0123456789abcdef, built 2026-01-02T03:04:05Z, " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")\ndirty\n"
	if string(out) != want {
		t.Errorf("output %q, want %q", out, want)
	}
}

func TestFromGitDescribesTheRepository(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	s := FromGit(context.Background(), ".")
	if s.Commit == "" {
		t.Skip("not in a git work tree")
	}
	if !strings.HasPrefix(s.Version, "v") || (s.TreeState != "clean" && s.TreeState != "dirty") || len(s.Date) != len(dateLayout) {
		t.Errorf("FromGit = %+v, want a v-version, a tree state and an ISO 8601 date", s)
	}
	if none := FromGit(context.Background(), t.TempDir()); none != (Source{Version: "v0.0.0-dev"}) {
		t.Errorf("FromGit outside a work tree = %+v, want the version v0.0.0-dev only", none)
	}
}

func TestPrintVersion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, ""},
		{[]string{"--version"}, String("prog") + "\n"},
		{[]string{"--version=raw"}, "version.Info{"},
	} {
		fs := pflag.NewFlagSet("prog", pflag.ContinueOnError)
		AddVersionFlag(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		printed := PrintVersion(&out, fs, "prog")
		// verflag's flag is one for the process.
		_ = fs.Set("version", "false")
		if printed != (tc.want != "") || !strings.HasPrefix(out.String(), tc.want) {
			t.Errorf("%v: printed %v %q, want %q", tc.args, printed, out.String(), tc.want)
		}
	}
}

func TestCollectorIsOneGauge(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector())
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(families) != 1 || families[0].GetName() != MetricName || len(families[0].GetMetric()) != 1 || families[0].GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Fatalf("gathered %v, want one %s of value 1", families, MetricName)
	}
	got := map[string]string{}
	for _, l := range families[0].GetMetric()[0].GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	for i, name := range LabelNames {
		if got[name] != LabelValues()[i] {
			t.Errorf("label %s=%q, want %q", name, got[name], LabelValues()[i])
		}
	}
	if got := LabelValues()[3]; got != runtime.Version() {
		t.Errorf("go_version %q, want %q", got, runtime.Version())
	}
}

func TestParseVersionTakesASemanticVersionWithOrWithoutV(t *testing.T) {
	for in, want := range map[string]string{
		"v1.2.3":           "v1.2.3",
		"1.2.3":            "v1.2.3",
		"1.2.3-rc.1":       "v1.2.3-rc.1",
		"v0.0.0-4-gabcdef": "v0.0.0-4-gabcdef",
	} {
		if got, err := ParseVersion(in); err != nil || got != want {
			t.Errorf("ParseVersion(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "1.2", "latest", "v1.2.3+build.5", "abcdef0"} {
		if got, err := ParseVersion(bad); err == nil || !strings.Contains(err.Error(), "semantic version") {
			t.Errorf("ParseVersion(%q) = %q, %v; want an error naming a semantic version", bad, got, err)
		}
	}
}

func TestChartVersionDropsTheLeadingV(t *testing.T) {
	for version, want := range map[string]string{"v1.2.3": "1.2.3", "v0.0.0-abcdef0-dirty": "0.0.0-abcdef0-dirty"} {
		if got := ChartVersion(version); got != want {
			t.Errorf("ChartVersion(%q) = %q, want %q", version, got, want)
		}
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/gpudra/gpudra/internal/buildinfo"
)

func TestVersion(t *testing.T) {
	want := buildinfo.String("gpudra") + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}} {
		root := newRootCommand()
		// verflag's --version is one for the process: leave it off for the other tests.
		t.Cleanup(func() { _ = root.Flags().Set("version", "false") })
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if out.String() != want {
			t.Errorf("%v printed %q, want %q", args, out.String(), want)
		}
	}
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"version", "-o", "json"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	var got struct{ GitVersion, GitCommit, BuildDate, GoVersion string }
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("version -o json: %v\n%s", err, out.String())
	}
	if v := buildinfo.Get(); got.GitVersion != v.GitVersion || got.GitCommit != v.GitCommit || got.BuildDate != v.BuildDate || got.GoVersion != v.GoVersion {
		t.Errorf("version -o json = %+v, want %+v", got, v)
	}
}

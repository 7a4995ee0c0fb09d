package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpudra/gpudra/internal/buildinfo"
	"github.com/gpudra/gpudra/internal/logoptions"
)

func TestVersionFlag(t *testing.T) {
	cmd := newCommand()
	// verflag's --version is one for the process: leave it off for the other tests.
	t.Cleanup(func() { _ = cmd.Flags().Set("version", "false") })
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--version"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if want := buildinfo.String("gpudra-kubelet-plugin") + "\n"; out.String() != want {
		t.Errorf("--version printed %q, want %q", out.String(), want)
	}
}

func TestLoggingFlags(t *testing.T) {
	f := flags{logging: logoptions.New()}
	if err := newCommandFor(&f).Flags().Parse([]string{"--logging-format=json", "-v=3"}); err != nil {
		t.Fatal(err)
	}
	if f.logging.Format != "json" || f.logging.Verbosity != 3 {
		t.Errorf("--logging-format=json -v=3: format %q verbosity %d", f.logging.Format, f.logging.Verbosity)
	}
	if err := logoptions.Validate(f.logging); err != nil {
		t.Errorf("--logging-format=json -v=3: %v", err)
	}
	// The chart's flag, and the klog flags' long form of it.
	for _, v := range []string{"-v=2", "--v=2"} {
		f := flags{logging: logoptions.New()}
		if err := newCommandFor(&f).Flags().Parse([]string{v}); err != nil || f.logging.Verbosity != 2 {
			t.Errorf("%s: err %v, verbosity %d", v, err, f.logging.Verbosity)
		}
	}
	cmd := newCommand()
	cmd.SetArgs([]string{"--logging-format=xml", "--node-name=n"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), `--logging-format="xml"`) || !strings.Contains(err.Error(), "text, json") {
		t.Errorf("--logging-format=xml: err %v, want one naming the flag and the accepted text, json", err)
	}
}

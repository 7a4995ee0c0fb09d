package main

import (
	"strings"
	"testing"

	"github.com/gpudra/gpudra/internal/buildinfo/buildinfotest"
	"github.com/gpudra/gpudra/internal/logoptions"
)

func TestVersionFlag(t *testing.T) {
	buildinfotest.CheckVersionFlag(t, newCommand(), "gpudra-kubelet-plugin")
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

package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpudra/gpudra/internal/logoptions"
)

// A metrics address the plugin could not listen on stops it at start, naming the flag and
// the accepted range, before it registers with the kubelet or publishes a slice.
func TestMetricsAddressIsCheckedAtStart(t *testing.T) {
	for _, tc := range []struct {
		name, addr, want string
	}{
		{"a port beyond 65535", "127.0.0.1:70000", `--metrics-bind-address="127.0.0.1:70000": port "70000": accepted range is 0 to 65535`},
		{"a negative port", ":-1", "accepted range is 0 to 65535"},
		{"no port", "127.0.0.1", `--metrics-bind-address="127.0.0.1": want host:port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cmd := newCommandFor(&flags{logging: logoptions.New()})
			cmd.SetArgs([]string{"--node-name=node-1", "--nvml=sim:dgx-h100", "--kubeconfig=/nonexistent",
				"--plugin-data-dir=" + filepath.Join(dir, "data"), "--metrics-bind-address=" + tc.addr})
			if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("--metrics-bind-address=%s: %v, want an error saying %q", tc.addr, err, tc.want)
			}
		})
	}
	for _, addr := range []string{"", "127.0.0.1:9400", ":9400", "10.0.0.7:9400"} {
		if err := (flags{metricsAt: addr}).validate(); err != nil {
			t.Errorf("--metrics-bind-address=%q refused: %v", addr, err)
		}
	}
}

package main

import (
	"strings"
	"testing"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"

	"github.com/gpudra/gpudra/internal/features"
)

// The web view is alpha: --dashboard-bind-address stops the controller at start unless
// WebView is on, naming the flag and the gate.
func TestDashboardNeedsTheWebViewGate(t *testing.T) {
	cmd := newCommand()
	cmd.SetArgs([]string{"--dashboard-bind-address=:8444", "--kubeconfig=/nonexistent"})
	want := "--dashboard-bind-address requires --feature-gates=WebView=true (alpha)"
	if err := cmd.Execute(); err == nil || err.Error() != want {
		t.Errorf("--dashboard-bind-address with WebView off: %v, want %q", err, want)
	}
	if err := parse(t, "--feature-gates=WebView=true", "--dashboard-bind-address=:8444").validate(); err != nil {
		t.Errorf("--dashboard-bind-address with WebView on: %v", err)
	}
}

// The admission check has no flag: TopologyAdmissionCheck (beta) alone runs it.
func TestAdmissionCheckFollowsItsGate(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, true},
		{[]string{"--feature-gates=TopologyAdmissionCheck=false"}, false},
		{[]string{"--feature-gates=TopologyAdmissionCheck=true,WebView=false"}, true},
	} {
		o := parse(t, tc.args...)
		if err := o.validate(); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if got := o.enabled(features.TopologyAdmissionCheck); got != tc.want {
			t.Errorf("%v: admission check on = %v, want %v", tc.args, got, tc.want)
		}
	}
}

func TestControllerFeatureGatesFlag(t *testing.T) {
	cmd := newCommand()
	help := cmd.Flags().Lookup("feature-gates")
	if help == nil || !strings.Contains(help.Usage, "WebView=true|false (ALPHA - default=false)") || !strings.Contains(help.Usage, "TopologyAdmissionCheck=true|false (BETA - default=true)") {
		t.Fatalf("--feature-gates = %+v, want its help to list the gates", help)
	}
	cmd.SetArgs([]string{"--feature-gates=Dashboard=true", "--kubeconfig=/nonexistent"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "Dashboard") || !strings.Contains(err.Error(), "known gates: ") || !strings.Contains(err.Error(), "WebView") {
		t.Errorf("an unknown gate: %v, want an error naming it and the known gates", err)
	}
}

// The HAMi pods' webhook is served, and its configuration gets the webhook's CA, only with
// --hami-pods, which needs its alpha gate: a controller without it never touches the HAMi
// pods' MutatingWebhookConfiguration, whatever its gates.
func TestHAMiPodsWebhookFollowsItsFlagAndGate(t *testing.T) {
	o := parse(t, "--hami-pods", "--webhook-port=9443")
	if err := o.validate(); err == nil || !strings.Contains(err.Error(), "--hami-pods requires --feature-gates=HAMiPods=true (alpha)") {
		t.Errorf("--hami-pods without its gate: %v", err)
	}
	o = parse(t, "--hami-pods", "--feature-gates=HAMiPods=true")
	if err := o.validate(); err == nil || !strings.Contains(err.Error(), "--webhook-port") {
		t.Errorf("--hami-pods without --webhook-port: %v", err)
	}
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--feature-gates=AllAlpha=true"}, false},
		{[]string{"--hami-pods", "--webhook-port=9443", "--feature-gates=HAMiPods=true"}, true},
	} {
		o := parse(t, tc.args...)
		if err := o.validate(); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		var mutating bool
		for _, w := range o.webhookConfigurations() {
			mutating = mutating || w.Name == "gpudra-hami-pods" && w.Type == rotator.Mutating
		}
		if mutating != tc.want {
			t.Errorf("%v: CA injected into gpudra-hami-pods = %v, want %v", tc.args, mutating, tc.want)
		}
	}
}

// With JobDependencies on, the kept webhook CA also goes into the job dependencies'
// MutatingWebhookConfiguration; off, only into the config validation.
func TestJobDependenciesWebhookGetsTheCA(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"gpudra-config-validation"}},
		{[]string{"--feature-gates=JobDependencies=true"}, []string{"gpudra-config-validation", "gpudra-job-dependencies"}},
	} {
		var got []string
		for _, w := range parse(t, tc.args...).webhookConfigurations() {
			got = append(got, w.Name)
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%v: CA injected into %v, want %v", tc.args, got, tc.want)
		}
	}
}

// LargeJobsFirst runs with its bands and the webhook; bad bands, bands without the gate or
// the webhook, and too short a wait are refused naming the flag. Running, its webhook
// configuration gets the CA; the gate alone (AllAlpha) runs nothing.
func TestLargeJobsFirstFlags(t *testing.T) {
	const on = "--feature-gates=LargeJobsFirst=true"
	for _, tc := range []struct {
		args []string
		want string // "" for accepted
	}{
		{args: []string{on, "--webhook-port=9443", "--large-jobs-first-bands=16:gpudra-large,64:gpudra-huge"}},
		{args: []string{"--large-jobs-first-bands=16:gpudra-large"}, want: "--large-jobs-first-bands requires --feature-gates=LargeJobsFirst=true (alpha)"},
		{args: []string{on, "--webhook-port=9443"}},
		{args: []string{"--feature-gates=AllAlpha=true"}},
		{args: []string{on, "--large-jobs-first-bands=16:gpudra-large"}, want: "--large-jobs-first-bands needs --webhook-port"},
		{args: []string{on, "--webhook-port=9443", "--large-jobs-first-bands=64:gpudra-huge,16:gpudra-large"}, want: "--large-jobs-first-bands: band 1 (16:gpudra-large): minGPUs must be above the band before's 64"},
		{args: []string{on, "--webhook-port=9443", "--large-jobs-first-bands=16:gpudra-large", "--large-jobs-first-max-wait=10s"}, want: "--large-jobs-first-max-wait=10s: want at least 1m0s"},
	} {
		err := parse(t, tc.args...).validate()
		if tc.want == "" && err != nil {
			t.Errorf("%v: %v", tc.args, err)
		}
		if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%v: err %v, want one saying %q", tc.args, err, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{args: []string{on, "--webhook-port=9443", "--large-jobs-first-bands=16:gpudra-large"}, want: "gpudra-config-validation,gpudra-large-jobs-first"},
		{args: []string{on, "--webhook-port=9443"}, want: "gpudra-config-validation"},
	} {
		o := parse(t, tc.args...)
		var got []string
		for _, w := range o.webhookConfigurations() {
			got = append(got, w.Name)
		}
		if strings.Join(got, ",") != tc.want {
			t.Errorf("%v: CA injected into %v, want %s", tc.args, got, tc.want)
		}
		if runs := o.largeJobsFirst() != nil; runs != strings.Contains(tc.want, "large") {
			t.Errorf("%v: the policy runs = %v", tc.args, runs)
		}
	}
}

// Defragmentation runs with its gate and the admission check; bad bounds are refused naming
// the flag.
func TestDefragmentationFlags(t *testing.T) {
	const on = "--feature-gates=Defragmentation=true"
	for _, tc := range []struct {
		args []string
		want string // "" for accepted
	}{
		{args: []string{on}},
		{args: []string{on, "--defrag-interval=30s", "--defrag-evictions-per-minute=2", "--defrag-max-evictions=4"}},
		{args: []string{"--feature-gates=Defragmentation=true,TopologyAdmissionCheck=false"}, want: "--feature-gates=Defragmentation=true needs TopologyAdmissionCheck on"},
		{args: []string{on, "--defrag-interval=1s"}, want: "--defrag-interval=1s: want at least 10s"},
		{args: []string{on, "--defrag-evictions-per-minute=0"}, want: "--defrag-evictions-per-minute=0: want at least 1"},
		{args: []string{on, "--defrag-max-evictions=-1"}, want: "--defrag-max-evictions=-1: want at least 1"},
	} {
		err := parse(t, tc.args...).validate()
		if tc.want == "" && err != nil {
			t.Errorf("%v: %v", tc.args, err)
		}
		if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%v: err %v, want one saying %q", tc.args, err, tc.want)
		}
	}
}

// DataPrewarm's bound is refused below 1, naming the flag.
func TestPrewarmFlags(t *testing.T) {
	if err := parse(t, "--feature-gates=DataPrewarm=true", "--prewarm-max-dataloads=3").validate(); err != nil {
		t.Errorf("a bound of 3: %v", err)
	}
	if err := parse(t, "--feature-gates=DataPrewarm=true", "--prewarm-max-dataloads=0").validate(); err == nil ||
		!strings.Contains(err.Error(), "--prewarm-max-dataloads=0: want at least 1") {
		t.Errorf("a bound of 0: err %v, want one naming --prewarm-max-dataloads", err)
	}
}

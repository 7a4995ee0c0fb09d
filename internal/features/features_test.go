package features

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/component-base/featuregate"
)

// Every gate has a stage that is available at this release, alpha gates off and beta
// gates on by default.
func TestEveryGateHasAStage(t *testing.T) {
	at := version.MustParse(Release)
	gate := New()
	if len(Known()) == 0 {
		t.Fatal("no gates")
	}
	for _, name := range Known() {
		s := Specs()[featuregate.Feature(name)]
		if len(s) == 0 {
			t.Errorf("%s has no spec", name)
			continue
		}
		for _, spec := range s {
			if spec.Version == nil {
				t.Errorf("%s: a spec without the release that made it", name)
				continue
			}
			switch spec.PreRelease {
			case featuregate.Alpha:
				if spec.Default {
					t.Errorf("%s: alpha since %s, on by default; alpha gates are off until asked for", name, spec.Version)
				}
			case featuregate.Beta:
				if !spec.Default {
					t.Errorf("%s: beta since %s, off by default; beta gates are on", name, spec.Version)
				}
			case featuregate.GA:
			default:
				t.Errorf("%s: stage %q, want Alpha, Beta or GA", name, spec.PreRelease)
			}
		}
		if s[0].Version.GreaterThan(at) {
			t.Errorf("%s: first stage at %s, after this release %s: nobody could set it", name, s[0].Version, Release)
		}
		want := strings.HasPrefix(Stage(featuregate.Feature(name)), "beta")
		if gate.Enabled(featuregate.Feature(name)) != want {
			t.Errorf("%s (%s): enabled by default = %v", name, Stage(featuregate.Feature(name)), !want)
		}
	}
}

func TestFeatureGatesFlag(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		want        map[featuregate.Feature]bool
		wantErr     []string
	}{
		{name: "nothing given: the defaults", want: map[featuregate.Feature]bool{DynamicMIG: false, MPSDaemonPods: true}},
		{name: "an alpha gate turned on", value: "DynamicMIG=true", want: map[featuregate.Feature]bool{DynamicMIG: true, WebView: false}},
		{name: "a beta gate turned off", value: "MPSDaemonPods=false,WebView=true", want: map[featuregate.Feature]bool{MPSDaemonPods: false, WebView: true}},
		{name: "every alpha gate", value: "AllAlpha=true", want: map[featuregate.Feature]bool{DynamicMIG: true, MemoryOversubscription: true, ClaimUsage: true}},
		{name: "an unknown gate names the known ones", value: "DynamicMig=true",
			wantErr: []string{"DynamicMig", "known gates: ", "DynamicMIG, HAMiCoreEnforcement, HAMiPods, JobDependencies, LargeJobsFirst, MIGLayouts"}},
		{name: "a value that is no bool", value: "DynamicMIG=yes", wantErr: []string{"DynamicMIG", "yes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gate := New()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			AddFlag(fs, gate)
			var args []string
			if tc.value != "" {
				args = []string{"--feature-gates=" + tc.value}
			}
			err := fs.Parse(args)
			if tc.wantErr != nil {
				for _, w := range tc.wantErr {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Errorf("--feature-gates=%s: err %v, want one saying %q", tc.value, err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("--feature-gates=%s: %v", tc.value, err)
			}
			for name, on := range tc.want {
				if gate.Enabled(name) != on {
					t.Errorf("--feature-gates=%s: %s enabled = %v, want %v", tc.value, name, !on, on)
				}
			}
		})
	}
}

// The flag's help lists every gate with its stage and default.
func TestFeatureGatesFlagHelpListsTheGates(t *testing.T) {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	AddFlag(fs, New())
	help := fs.Lookup(FlagName).Usage
	for _, name := range Known() {
		want := name + "=true|false (ALPHA - default=false)"
		if strings.HasPrefix(Stage(featuregate.Feature(name)), "beta") {
			want = name + "=true|false (BETA - default=true)"
		}
		if !strings.Contains(help, want) {
			t.Errorf("--feature-gates help lacks %q:\n%s", want, help)
		}
	}
}

func TestRequireNamesTheGateAndItsStage(t *testing.T) {
	gate := New()
	if err := gate.Set("MPSDaemonPods=false"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name featuregate.Feature
		what string
		want string
	}{
		{DynamicMIG, "--mig=dynamic", "--mig=dynamic requires --feature-gates=DynamicMIG=true (alpha)"},
		{MPSDaemonPods, "--mps-control-daemons=pod", "--mps-control-daemons=pod requires --feature-gates=MPSDaemonPods=true (beta, on by default)"},
	} {
		if err := Require(gate, tc.name, tc.what); err == nil || err.Error() != tc.want {
			t.Errorf("Require(%s): %v, want %q", tc.name, err, tc.want)
		}
	}
	if err := Require(gate, TimeSlicing, "a time-slice"); err != nil {
		t.Errorf("a beta gate left at its default: %v", err)
	}
}

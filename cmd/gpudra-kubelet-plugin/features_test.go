package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpudra/gpudra/internal/logoptions"
	plugin "github.com/gpudra/gpudra/kubeletplugin"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// A flag asking for a behaviour whose gate is off stops the plugin at start, naming the
// flag and the gate; with the gate on the same flag is accepted.
func TestGatedFlagsAreRefusedWhileTheirGateIsOff(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		gates string // what turns the gate on (alpha) or off (beta)
		want  string
	}{
		{"dynamic MIG is alpha", []string{"--mig=dynamic"}, "DynamicMIG=true",
			"--mig=dynamic requires --feature-gates=DynamicMIG=true (alpha)"},
		{"memory oversubscription is alpha", []string{"--memory-oversubscription=2"}, "MemoryOversubscription=true",
			"--memory-oversubscription=2 requires --feature-gates=MemoryOversubscription=true (alpha)"},
		{"HAMi-core enforcement is alpha", []string{"--vgpu-library=/usr/local/vgpu/libvgpu.so"}, "HAMiCoreEnforcement=true",
			"--vgpu-library requires --feature-gates=HAMiCoreEnforcement=true (alpha)"},
		{"share priority from pods is alpha", []string{"--share-priority-threshold=1000"}, "SharePriorityFromPods=true",
			"--share-priority-threshold requires --feature-gates=SharePriorityFromPods=true (alpha)"},
		{"MIG layouts are beta, refused when turned off", []string{"--mig-layouts=/etc/gpudra/mig-layouts.yaml"}, "MIGLayouts=false",
			"--mig-layouts requires --feature-gates=MIGLayouts=true (beta, on by default)"},
		{"MPS daemon pods are beta, refused when turned off", []string{"--mps-control-daemons=pod"}, "MPSDaemonPods=false",
			"--mps-control-daemons=pod requires --feature-gates=MPSDaemonPods=true (beta, on by default)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := []string{"--node-name=node-1", "--nvml=sim:dgx-h100", "--kubeconfig=/nonexistent",
				"--plugin-data-dir=" + filepath.Join(t.TempDir(), "data")}
			alpha := strings.HasSuffix(tc.gates, "=true")
			off, on := base, base
			if alpha {
				on = append(append([]string{}, base...), "--feature-gates="+tc.gates)
			} else {
				off = append(append([]string{}, base...), "--feature-gates="+tc.gates)
			}
			err := execute(append(off, tc.args...))
			if err == nil || err.Error() != tc.want {
				t.Errorf("%v with the gate off: %v, want %q", tc.args, err, tc.want)
			}
			f := flags{logging: logoptions.New()}
			fs := newCommandFor(&f).Flags()
			if err := fs.Parse(append(on, tc.args...)); err != nil {
				t.Fatal(err)
			}
			f.sharePriorityThreshold = givenOrNil(fs, sharePriorityFlag, f.sharePriorityThreshold)
			if err := f.checkFeatureGates(); err != nil {
				t.Errorf("%v with the gate on: %v", tc.args, err)
			}
		})
	}
}

func execute(args []string) error {
	cmd := newCommandFor(&flags{logging: logoptions.New()})
	cmd.SetArgs(args)
	return cmd.Execute()
}

func TestUnknownFeatureGateNamesTheKnownOnes(t *testing.T) {
	help := newCommandFor(&flags{logging: logoptions.New()}).Flags().Lookup("feature-gates")
	if help == nil || !strings.Contains(help.Usage, "DynamicMIG=true|false (ALPHA - default=false)") || !strings.Contains(help.Usage, "MPSDaemonPods=true|false (BETA - default=true)") {
		t.Fatalf("--feature-gates = %+v, want its help to list the gates", help)
	}
	err := execute([]string{"--feature-gates=DynamicMig=true", "--node-name=node-1"})
	if err == nil || !strings.Contains(err.Error(), "DynamicMig") || !strings.Contains(err.Error(), "known gates: ") || !strings.Contains(err.Error(), "DynamicMIG") {
		t.Errorf("an unknown gate: %v, want an error naming it and the known gates", err)
	}
}

// Per-claim usage sampling has no flag of its own: ClaimUsage alone turns it on and off.
func TestClaimUsageGateTurnsTheSamplingOnAndOff(t *testing.T) {
	for _, tc := range []struct {
		args         []string
		wantDisabled bool
	}{
		{nil, false},
		{[]string{"--feature-gates=ClaimUsage=false"}, true},
		{[]string{"--feature-gates=ClaimUsage=true", "--pod-resources-socket=/run/pr.sock"}, false},
	} {
		f := flags{logging: logoptions.New()}
		if err := newCommandFor(&f).Flags().Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if got := f.usageConfig(); got.Disabled != tc.wantDisabled || got.PodResourcesSocket != f.podResourcesSocket {
			t.Errorf("%v: usage config %+v, want disabled %v", tc.args, got, tc.wantDisabled)
		}
	}
}

// With TimeSlicing off a claim asking for a time-slice fails its prepare, naming the gate,
// and the GPUs still get their default time-slice back.
func TestTimeSlicingGate(t *testing.T) {
	for _, tc := range []struct {
		gates   string
		wantErr string
	}{
		{"", ""},
		{"--feature-gates=TimeSlicing=false", "sharing.timeSlicing.interval=Long requires --feature-gates=TimeSlicing=true (beta, on by default)"},
	} {
		f := flags{logging: logoptions.New()}
		var args []string
		if tc.gates != "" {
			args = []string{tc.gates}
		}
		if err := newCommandFor(&f).Flags().Parse(args); err != nil {
			t.Fatal(err)
		}
		sim := &plugin.SimulatedTimeSlicer{}
		ts := f.gatedTimeSlicer(sim)
		err := ts.SetTimeSlice(context.Background(), "GPU-1", api.IntervalLong)
		if (err == nil) != (tc.wantErr == "") || (err != nil && err.Error() != tc.wantErr) {
			t.Errorf("%q: a Long time-slice: %v, want %q", tc.gates, err, tc.wantErr)
		}
		if err := ts.SetTimeSlice(context.Background(), "GPU-1", api.IntervalDefault); err != nil {
			t.Errorf("%q: the Default time-slice: %v", tc.gates, err)
		}
		want := api.IntervalDefault
		if got := sim.Interval("GPU-1"); got != want {
			t.Errorf("%q: GPU-1's time-slice is %q, want %q", tc.gates, got, want)
		}
	}
}

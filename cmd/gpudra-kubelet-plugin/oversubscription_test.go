package main

import (
	"context"
	"strings"
	"testing"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/internal/logoptions"
)

func TestMemoryOversubscriptionFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want float64
	}{
		{nil, 1},
		{[]string{"--memory-oversubscription=1.5"}, 1.5},
		{[]string{"--memory-oversubscription=4"}, 4},
	} {
		f := flags{logging: logoptions.New()}
		if err := newCommandFor(&f).Flags().Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		f.mig = string(driver.MIGStatic)
		opts, err := renderOptions(f)
		if err != nil || opts.MemoryOversubscription != tc.want || opts.MIG != driver.MIGStatic {
			t.Errorf("%v: options %+v, err %v; want memory oversubscription %v", tc.args, opts, err, tc.want)
		}
	}
}

func TestMemoryOversubscriptionFlagOutOfRangeIsRefused(t *testing.T) {
	for _, v := range []string{"0", "0.99", "4.5", "-1", "NaN", "+Inf"} {
		f := flags{logging: logoptions.New()}
		if err := newCommandFor(&f).Flags().Parse([]string{"--memory-oversubscription=" + v}); err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		f.nodeName, f.mig = "n1", string(driver.MIGStatic)
		// run checks its flags before it talks to the API server or NVML.
		err := run(context.Background(), f)
		if err == nil || !strings.Contains(err.Error(), "--memory-oversubscription") || !strings.Contains(err.Error(), "1 to 4") {
			t.Errorf("--memory-oversubscription=%s: err %v, want one naming the flag and the range 1 to 4", v, err)
		}
	}
	f := flags{logging: logoptions.New()}
	if err := newCommandFor(&f).Flags().Parse([]string{"--memory-oversubscription=lots"}); err == nil || !strings.Contains(err.Error(), "memory-oversubscription") {
		t.Errorf("--memory-oversubscription=lots: err %v, want one naming the flag", err)
	}
}

// TestPublishFlag: --publish chooses which devices the node publishes, and refuses what
// the publication would not use.
func TestPublishFlag(t *testing.T) {
	for _, tc := range []struct {
		args               []string
		noShares, noGroups bool
		mig                driver.MIGStrategy
		err                string
	}{
		{args: nil, mig: driver.MIGStatic},
		{args: []string{"--publish=all", "--mig=dynamic"}, mig: driver.MIGDynamic},
		{args: []string{"--publish=training"}, noShares: true, mig: driver.MIGNone},
		{args: []string{"--publish=whole"}, noShares: true, noGroups: true, mig: driver.MIGNone},
		{args: []string{"--publish=inference"}, err: "--publish: publication \"inference\": accepted values are all, training, whole"},
		{args: []string{"--publish=training", "--mig=dynamic"}, err: "--publish: publication \"training\" publishes no MIG devices"},
		{args: []string{"--publish=whole", "--mig-layouts=/etc/gpudra/mig-layouts.yaml"}, err: "--publish=whole publishes no MIG devices: --mig-layouts must be empty"},
		{args: []string{"--publish=training", "--memory-oversubscription=2"}, err: "--publish=training publishes no shares: --memory-oversubscription must be 1"},
	} {
		f := flags{logging: logoptions.New()}
		if err := newCommandFor(&f).Flags().Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		opts, err := renderOptions(f)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: err %v, want one containing %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || opts.NoShares != tc.noShares || opts.NoGroups != tc.noGroups || opts.MIG != tc.mig {
			t.Errorf("%v: options %+v, err %v; want no shares %v, no groups %v, MIG %s", tc.args, opts, err, tc.noShares, tc.noGroups, tc.mig)
		}
	}
}

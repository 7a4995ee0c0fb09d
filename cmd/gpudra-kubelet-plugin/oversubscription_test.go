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

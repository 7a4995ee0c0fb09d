package main

import (
	"strings"
	"testing"
)

func TestValidateAdmissionCheckWorkers(t *testing.T) {
	for _, n := range []int{1, 8, 64} {
		if err := validateAdmissionCheckWorkers(n); err != nil {
			t.Errorf("%d workers: %v", n, err)
		}
	}
	for _, n := range []int{0, -1} {
		if err := validateAdmissionCheckWorkers(n); err == nil || !strings.Contains(err.Error(), "--admission-check-workers") {
			t.Errorf("%d workers: err %v, want one naming --admission-check-workers", n, err)
		}
	}
}

// TestAdmissionCheckWorkersFlag proves the flag defaults to 8 and that a bad value stops the
// command before it reaches for a cluster.
func TestAdmissionCheckWorkersFlag(t *testing.T) {
	cmd := newCommand()
	if got := cmd.Flags().Lookup("admission-check-workers"); got == nil || got.DefValue != "8" {
		t.Fatalf("--admission-check-workers flag = %+v, want default 8", got)
	}
	cmd.SetArgs([]string{"--admission-check-workers=0", "--kubeconfig=/nonexistent"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "--admission-check-workers=0") {
		t.Errorf("--admission-check-workers=0: err %v, want one naming the flag", err)
	}
}

package nvmlbackend_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpudra/gpudra/cmd/internal/nvmlbackend"
	"github.com/gpudra/gpudra/driver/discover"
)

func TestRealNVMLNeverFallsBackToSimulation(t *testing.T) {
	b, err := nvmlbackend.Open("nvml", "n")
	if err == nil {
		defer b.Close()
		if b.Simulated {
			t.Fatal("the real backend returned a simulated server")
		}
		t.Skip("this machine has a working NVML library; the missing-library path cannot be exercised here")
	}
	if !errors.Is(err, discover.ErrNVMLUnavailable) {
		t.Fatalf("error %v is not ErrNVMLUnavailable", err)
	}
	for _, want := range []string{"libnvidia-ml.so.1", "--nvml=sim:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestBackendSpecErrors(t *testing.T) {
	for spec, want := range map[string]string{
		"cuda":                       `accepted values are "nvml"`,
		"sim:no-such-node":           "dgx-v100",
		"sim:/nonexistent/node.yaml": "node.yaml",
	} {
		if _, err := nvmlbackend.Open(spec, "n"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%q) = %v, want an error mentioning %q", spec, err, want)
		}
	}
}

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

func TestKFDBackendSpecs(t *testing.T) {
	for _, tc := range []struct{ nvml, kfd, want string }{
		{"none", "", "--nvml=none needs --kfd"},
		{"none", "rocm", `accepted values are "" (none), "sysfs"`},
		{"none", "sim:mi999", "mi300x-8"},
		{"nvml", "sim:mi300x-8", "libnvidia-ml.so.1"},
	} {
		if b, err := nvmlbackend.OpenNode(tc.nvml, tc.kfd, "n"); err == nil {
			b.Close()
			if tc.want != "libnvidia-ml.so.1" {
				t.Errorf("OpenNode(%q, %q) succeeded, want an error mentioning %q", tc.nvml, tc.kfd, tc.want)
			}
		} else if !strings.Contains(err.Error(), tc.want) && !strings.Contains(err.Error(), "simulated or real") {
			t.Errorf("OpenNode(%q, %q) = %v, want an error mentioning %q", tc.nvml, tc.kfd, err, tc.want)
		}
	}
	b, err := nvmlbackend.OpenNode("none", "sim:mixed-l40s-mi210", "n")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	inv, err := discover.Discover(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.GPUs) != 2 || inv.GPUs[0].VendorOf() != "nvidia" || inv.GPUs[1].Vendor != "amd" || !b.Simulated {
		t.Fatalf("the mixed simulated node: %+v", inv.GPUs)
	}
}

package discover_test

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/gpudra/gpudra/driver/discover"
	"github.com/gpudra/gpudra/driver/simulated"
)

func TestDiscoveryErrorsNameTheFailingCall(t *testing.T) {
	// Simulated nodes are go-nvml mock servers: override single calls to make them fail.
	// Only failures that are not one GPU's fail discovery (see discover_unreadable_test.go).
	cases := []struct {
		name string
		set  func(s *server.Server, gpu0 *server.Device)
		want []string
	}{
		{"no devices can be counted", func(s *server.Server, _ *server.Device) {
			s.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
		}, []string{"DeviceGetCount", "ERROR_UNKNOWN"}},
		{"the driver version cannot be read", func(s *server.Server, _ *server.Device) {
			s.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return "", nvml.ERROR_UNINITIALIZED }
		}, []string{"SystemGetDriverVersion", "ERROR_UNINITIALIZED"}},
		{"two readable GPUs' PCIe ancestor cannot be read", func(_ *server.Server, d *server.Device) {
			d.GetTopologyCommonAncestorFunc = func(nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
		}, []string{"GPU 0", "GetTopologyCommonAncestor(GPU 1)", "ERROR_UNKNOWN"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := simulated.Open("dgx-v100", "n")
			if err != nil {
				t.Fatal(err)
			}
			srv, ok := b.NVML.(*server.Server)
			if !ok {
				t.Fatalf("simulated NVML is a %T, want go-nvml's mock server", b.NVML)
			}
			tc.set(srv, srv.Devices[0].(*server.Device))
			_, err = discover.Discover(b)
			if err == nil {
				t.Fatal("discovery succeeded on a failing NVML")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

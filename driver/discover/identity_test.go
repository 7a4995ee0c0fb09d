package discover_test

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/gpudra/gpudra/driver/discover"
	"github.com/gpudra/gpudra/driver/simulated"
)

// Every brand and architecture NVML reports is published under go-nvlib's name (the one
// NVIDIA's DRA driver publishes), never as a number; one newer than go-nvlib is "Unknown".
func TestBrandAndArchitectureNamesAreGoNvlibs(t *testing.T) {
	cases := []struct {
		brand     nvml.BrandType
		arch      nvml.DeviceArchitecture
		wantBrand string
		wantArch  string
	}{
		{nvml.BRAND_TESLA, nvml.DEVICE_ARCH_VOLTA, "Tesla", "Volta"},
		{nvml.BRAND_GRID, nvml.DEVICE_ARCH_TURING, "Grid", "Turing"},
		{nvml.BRAND_QUADRO_RTX, nvml.DEVICE_ARCH_AMPERE, "QuadroRTX", "Ampere"},
		{nvml.BRAND_NVIDIA, nvml.DEVICE_ARCH_ADA, "Nvidia", "Ada Lovelace"},
		{nvml.BRAND_NVIDIA_RTX, nvml.DEVICE_ARCH_HOPPER, "NvidiaRTX", "Hopper"},
		{nvml.BRAND_GEFORCE_RTX, nvml.DEVICE_ARCH_BLACKWELL, "GeForceRTX", "Blackwell"},
		{nvml.BrandType(999), nvml.DeviceArchitecture(999), "Unknown", "Unknown"},
	}
	for _, tc := range cases {
		t.Run(tc.wantBrand+"/"+tc.wantArch, func(t *testing.T) {
			b, err := simulated.Open("dgx-v100", "n")
			if err != nil {
				t.Fatal(err)
			}
			srv := b.NVML.(*server.Server)
			for _, d := range srv.Devices {
				d := d.(*server.Device)
				d.GetBrandFunc = func() (nvml.BrandType, nvml.Return) { return tc.brand, nvml.SUCCESS }
				d.GetArchitectureFunc = func() (nvml.DeviceArchitecture, nvml.Return) { return tc.arch, nvml.SUCCESS }
			}
			inv, err := discover.Discover(b)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range inv.GPUs {
				if g.Brand != tc.wantBrand || g.Architecture != tc.wantArch {
					t.Fatalf("GPU %d: brand %q architecture %q, want %q %q", g.Index, g.Brand, g.Architecture, tc.wantBrand, tc.wantArch)
				}
			}
		})
	}
}

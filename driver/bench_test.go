package driver_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
)

// plainSlices is the baseline: the same eight whole GPUs with the same attributes, in one
// slice, without counters, shares, MIG devices or NVLink groups — what a driver that only
// hands out whole GPUs publishes.
func plainSlices(b *testing.B, inv *driver.Inventory, nodeName string) []*resourceapi.ResourceSlice {
	rs := render(b, inv, nodeName, driver.RenderOptions{MIG: driver.MIGNone, NoShares: true, NoGroups: true})
	var devs []resourceapi.Device
	for _, s := range rs {
		for _, d := range s.Spec.Devices {
			d.ConsumesCounters = nil
			devs = append(devs, d)
		}
	}
	s := rs[len(rs)-1].DeepCopy()
	s.Spec.Devices, s.Spec.SharedCounters, s.Spec.Pool.ResourceSliceCount = devs, nil, 1
	return []*resourceapi.ResourceSlice{s}
}

const (
	migSlice = `
devices:
  requests:
  - name: mig
    exactly:
      deviceClassName: mig.gpudra.dev
      selectors:
      - cel:
          expression: device.attributes["gpu.gpudra.dev"].migProfile == "1g.10gb"
`
	shareClaim = `
devices:
  requests:
  - name: share
    exactly:
      deviceClassName: gpu-share.gpudra.dev
      capacity:
        requests:
          memory: 10Gi
          compute: "25"
`
)

// BenchmarkAllocatorVsPlain times what kube-scheduler does per candidate node for one
// claim (Allocate on an allocator built once per pod) over gpudra's slices for DGX H100
// nodes and over plain slices of the same GPUs, interleaved in one loop, and reports
// the ratio (x-plain). The plain side gets the closest claim a plain driver can serve.
func BenchmarkAllocatorVsPlain(b *testing.B) {
	type claimCase struct{ name, gpudra, plain string }
	claims := []claimCase{
		{"1-gpu", wholeGPU, wholeGPU},
		{"4-gpu-nvlink-group", fourGPUGroup, fourCliqueGPUs},
		{"4-gpu-matchAttribute", fourCliqueGPUs, fourCliqueGPUs},
		{"share-10Gi-25pct", shareClaim, wholeGPU},
	}
	layouts := []struct {
		name   string
		opts   driver.RenderOptions
		migOn  []int // GPUs whose MIG mode the operator enabled
		claims []claimCase
	}{
		{"default", driver.RenderOptions{}, nil, claims},
		{"static-mig-on-4-7", driver.RenderOptions{}, []int{4, 5, 6, 7}, append(claims[:2:2], claimCase{"mig-1g.10gb", migSlice, wholeGPU}, claims[3])},
		{"dynamic-mig", driver.RenderOptions{MIG: driver.MIGDynamic}, nil, append(claims[:4:4], claimCase{"mig-1g.10gb", migSlice, wholeGPU})},
	}
	for _, nodes := range []int{1, 100} {
		for _, layout := range layouts {
			var ours, plain [][]*resourceapi.ResourceSlice
			devices := 0
			for n := range nodes {
				name := fmt.Sprintf("node-%03d", n)
				inv := simInventory(b, "dgx-h100", name)
				for _, g := range layout.migOn {
					inv.GPUs[g].MIG.Enabled = true
				}
				rs := render(b, inv, name, layout.opts)
				if n == 0 {
					for _, s := range rs {
						devices += len(s.Spec.Devices)
					}
				}
				ours = append(ours, rs)
				plain = append(plain, plainSlices(b, inv, name))
			}
			for _, tc := range layout.claims {
				b.Run(fmt.Sprintf("nodes=%d/%s(%d-devices)/%s", nodes, layout.name, devices, tc.name), func(b *testing.B) {
					ctx := context.Background()
					oursAlloc, err := newState(b, ours...).Allocator(ctx)
					if err != nil {
						b.Fatal(err)
					}
					plainAlloc, err := newState(b, plain...).Allocator(ctx)
					if err != nil {
						b.Fatal(err)
					}
					oursClaim, plainClaim := claim(b, tc.gpudra), claim(b, tc.plain)
					var tOurs, tPlain time.Duration
					for b.Loop() {
						start := time.Now()
						if _, err := allocation.AllocateOn(ctx, oursAlloc, "node-000", oursClaim); err != nil {
							b.Fatal(err)
						}
						mid := time.Now()
						if _, err := allocation.AllocateOn(ctx, plainAlloc, "node-000", plainClaim); err != nil {
							b.Fatal(err)
						}
						tOurs += mid.Sub(start)
						tPlain += time.Since(mid)
					}
					b.ReportMetric(float64(tOurs.Nanoseconds())/float64(b.N), "gpudra-ns/claim")
					b.ReportMetric(float64(tPlain.Nanoseconds())/float64(b.N), "plain-ns/claim")
					b.ReportMetric(float64(tOurs)/float64(tPlain), "x-plain")
				})
			}
		}
	}
}

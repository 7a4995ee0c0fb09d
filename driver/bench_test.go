package driver_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
)

// plainSlices is the baseline: driver.PlainSlices of the node.
func plainSlices(b *testing.B, inv *driver.Inventory, nodeName string) []*resourceapi.ResourceSlice {
	rs, err := driver.PlainSlices(inv, nodeName)
	if err != nil {
		b.Fatal(err)
	}
	return rs
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

// cpuTime is the CPU time this process has used. The benchmark times with it rather
// than the wall clock so that other work on a shared machine does not land on one side
// of the ratio; it includes the garbage collector's background work, which is part of
// what an allocation costs (kube-scheduler filters nodes in parallel, so CPU time is what
// bounds its throughput).
func cpuTime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		panic(err)
	}
	return time.Duration(ts.Nano())
}

// BenchmarkAllocatorVsPlain times what kube-scheduler does per candidate node for one
// claim (Allocate on an allocator built once per pod) over gpudra's slices for DGX H100
// nodes and over plain slices of the same GPUs, interleaved in one loop, and reports
// the ratio of CPU time (x-plain) and of wall time (x-plain-wall). The plain side gets
// the closest claim a plain driver can serve.
func BenchmarkAllocatorVsPlain(b *testing.B) {
	// One Filter call runs on one goroutine. With one P the garbage collector's work runs
	// in the loop whose allocations caused it, instead of beside it on another core
	// where it would be charged to whichever side happened to be running.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
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
		migOn  []int // GPUs the operator partitioned into seven 1g.10gb instances each
		busy   []int // GPUs already allocated whole, on both sides
		claims []claimCase
	}{
		{"default", driver.RenderOptions{}, nil, nil, claims},
		{"default-gpus-0-3-busy", driver.RenderOptions{}, nil, []int{0, 1, 2, 3}, claims},
		{"static-mig-on-4-7", driver.RenderOptions{}, []int{4, 5, 6, 7}, nil, append(claims[:2:2], claimCase{"mig-1g.10gb", migSlice, wholeGPU}, claims[3])},
		{"dynamic-mig", driver.RenderOptions{MIG: driver.MIGDynamic}, nil, nil, append(claims[:4:4], claimCase{"mig-1g.10gb", migSlice, wholeGPU})},
	}
	for _, nodes := range []int{1, 100} {
		for _, layout := range layouts {
			var ours, plain [][]*resourceapi.ResourceSlice
			devices := 0
			for n := range nodes {
				name := fmt.Sprintf("node-%03d", n)
				split := map[int][]string{}
				for _, g := range layout.migOn {
					split[g] = repeat("1g.10gb", 7)
				}
				_, inv := partitioned(b, "dgx-h100", name, split)
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
					oursState, plainState := newState(b, ours...), newState(b, plain...)
					for _, g := range layout.busy {
						mustAllocate(b, oursState, "node-000", gpuByIndex(g))
						mustAllocate(b, plainState, "node-000", gpuByIndex(g))
					}
					oursAlloc, err := oursState.Allocator(ctx)
					if err != nil {
						b.Fatal(err)
					}
					plainAlloc, err := plainState.Allocator(ctx)
					if err != nil {
						b.Fatal(err)
					}
					oursClaim, plainClaim := claim(b, tc.gpudra), claim(b, tc.plain)
					var tOurs, tPlain, wOurs, wPlain time.Duration
					for b.Loop() {
						start, cStart := time.Now(), cpuTime()
						if _, err := allocation.AllocateOn(ctx, oursAlloc, "node-000", oursClaim); err != nil {
							b.Fatal(err)
						}
						mid, cMid := time.Now(), cpuTime()
						if _, err := allocation.AllocateOn(ctx, plainAlloc, "node-000", plainClaim); err != nil {
							b.Fatal(err)
						}
						end, cEnd := time.Now(), cpuTime()
						tOurs, tPlain = tOurs+cMid-cStart, tPlain+cEnd-cMid
						wOurs, wPlain = wOurs+mid.Sub(start), wPlain+end.Sub(mid)
					}
					b.ReportMetric(float64(tOurs.Nanoseconds())/float64(b.N), "gpudra-cpu-ns/claim")
					b.ReportMetric(float64(tPlain.Nanoseconds())/float64(b.N), "plain-cpu-ns/claim")
					b.ReportMetric(float64(tOurs)/float64(tPlain), "x-plain")
					b.ReportMetric(float64(wOurs)/float64(wPlain), "x-plain-wall")
				})
			}
		}
	}
}

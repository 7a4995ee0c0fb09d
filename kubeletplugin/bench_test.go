package kubeletplugin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

// backgroundClaims are the share claims already prepared on the benchmark's node, so
// that each prepare runs on a node in use (its checks and its checkpoint's compactions
// see them), not an empty one.
const backgroundClaims = 8

// BenchmarkPrepareVsFloor measures what the kubelet waits for when it prepares a claim
// (PrepareResourceClaims with one allocated claim, on a simulated DGX H100 with MIG
// devices published) against the physical floor of a prepare: writing the same CDI spec
// with the same CDI library call to another directory. Each iteration prepares a claim
// under a fresh UID, writes the floor spec, unprepares the claim and removes the floor
// spec; which of prepare and floor goes first alternates, so that machine noise and warm
// caches land on both. p99-x-floor is the prepare's p99 over the floor's p99. Neither
// fsyncs: the CDI library writes the plugin's spec and the floor's alike (temporary file,
// rename), and the plugin's checkpoint journal is not fsynced either (after a power loss
// the boot id changes and the checkpoint is dropped).
func BenchmarkPrepareVsFloor(b *testing.B) {
	kinds := []struct{ name, spec string }{
		{"whole-gpu", wholeGPU},
		{"share-10Gi-25pct", shareClaim("10Gi", "25", "")},
		{"mig-1g.10gb", migClaim},
	}
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			klog.SetLogger(logr.Discard()) // setup's log lines; the measured calls log to ctx
			b.Cleanup(klog.ClearLogger)
			n := newNode(b, "dgx-h100")
			d := n.newDriver(nil)
			for range backgroundClaims {
				mustPrepare(b, d, n.allocate(shareClaim("1Gi", "5", "")))
			}
			floor, err := cdiapi.NewCache(cdiapi.WithSpecDirs(b.TempDir()), cdiapi.WithAutoRefresh(false))
			if err != nil {
				b.Fatal(err)
			}
			ctx := klog.NewContext(context.Background(), textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(io.Discard))))
			template := n.allocate(k.spec)
			// The floor writes the spec the plugin wrote in the previous iteration.
			spec := preparedSpec(b, n, d, template, "warm-up")

			var prep, unprep, write, remove []time.Duration
			i := 0
			for b.Loop() {
				i++
				c := template.DeepCopy()
				c.UID = types.UID(fmt.Sprintf("bench-%d", i))
				floorName := "gpudra.dev-gpu_floor-" + string(c.UID) + ".json"
				floorWrite := func() {
					start := time.Now()
					if err := floor.WriteSpec(spec, floorName); err != nil {
						b.Fatal(err)
					}
					write = append(write, time.Since(start))
				}
				if i%2 == 0 {
					floorWrite()
				}
				start := time.Now()
				res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
				prep = append(prep, time.Since(start))
				if err != nil || res[c.UID].Err != nil {
					b.Fatalf("prepare: %v %v", err, res[c.UID].Err)
				}
				if i%2 == 1 {
					floorWrite()
				}
				b.StopTimer()
				spec = readSpec(b, n, c.UID)
				b.StartTimer()

				start = time.Now()
				out, err := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: c.UID}})
				unprep = append(unprep, time.Since(start))
				if err != nil || out[c.UID] != nil {
					b.Fatalf("unprepare: %v %v", err, out[c.UID])
				}
				start = time.Now()
				if err := floor.RemoveSpec(floorName); err != nil {
					b.Fatal(err)
				}
				remove = append(remove, time.Since(start))
			}
			report(b, "", prep)
			report(b, "floor-", write)
			report(b, "unprepare-", unprep)
			report(b, "floor-remove-", remove)
			b.ReportMetric(percentile(prep, 50).Seconds()/percentile(write, 50).Seconds(), "p50-x-floor")
			b.ReportMetric(percentile(prep, 99).Seconds()/percentile(write, 99).Seconds(), "p99-x-floor")
		})
	}
}

// preparedSpec prepares a copy of the claim under uid, returns the CDI spec the plugin
// wrote for it and unprepares it again.
func preparedSpec(b *testing.B, n *node, d *plugin.Driver, template *resourceapi.ResourceClaim, uid types.UID) *cdispec.Spec {
	b.Helper()
	c := template.DeepCopy()
	c.UID = uid
	mustPrepare(b, d, c)
	spec := readSpec(b, n, uid)
	if err := unprepare(b, d, c); err != nil {
		b.Fatal(err)
	}
	return spec
}

func readSpec(b *testing.B, n *node, uid types.UID) *cdispec.Spec {
	b.Helper()
	raw, err := os.ReadFile(n.specPath(uid))
	if err != nil {
		b.Fatal(err)
	}
	var s cdispec.Spec
	if err := json.Unmarshal(raw, &s); err != nil {
		b.Fatal(err)
	}
	return &s
}

func report(b *testing.B, prefix string, ds []time.Duration) {
	b.ReportMetric(float64(percentile(ds, 50).Microseconds()), prefix+"p50-us")
	b.ReportMetric(float64(percentile(ds, 99).Microseconds()), prefix+"p99-us")
}

// percentile is the nearest-rank p-th percentile of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	rank := (p*len(s) + 99) / 100
	return s[max(rank, 1)-1]
}

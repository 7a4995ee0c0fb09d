// Command tiers puts numbers on two choices a platform team makes about GPU shares:
//
//	go run ./test/bench/tiers [-seed 1] [-ticks 200000] [-shares 400]
//
// Memory oversubscription, measured with Kubernetes' real structured allocator: shares of
// mixed memory sizes (2–24 GiB, 5 % compute each) are allocated one after another onto a
// simulated DGX H100 node as gpudra's plugin publishes it, with --memory-oversubscription
// 1, 1.25, 1.5 and 2, until the node is full; the report gives how many shares fit and
// the ratio to 1 (no oversubscription).
//
// Share tiers, as a model of one GPU: four inference tenants with compute requests of 40,
// 30, 20 and 10 % and bursty demand (each, per tick, busy with probability 0.3 at a demand
// drawn from 20–100 %, else 5 %). A tenant gets its demand up to its cap; when the capped
// demands add up to more than the GPU, the GPU is shared in proportion to them (what MPS
// without partitioning and time-slicing do), except that High priority tenants are served
// first. Fixed caps each tenant at its request; Guaranteed caps it at computeLimit. The
// report gives the GPU's mean utilization (and its ratio to Fixed), and per tenant the share
// of busy ticks in which it got at least its floor (min(demand, request)). It is a model
// of the tiers' arithmetic, not a measurement of a GPU.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"text/tabwriter"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/driver/simulated"
)

func main() {
	seed := flag.Int64("seed", 1, "random seed of the share sizes and the demand")
	ticks := flag.Int("ticks", 200000, "ticks of the tier model")
	shares := flag.Int("shares", 400, "shares to try to allocate per factor")
	flag.Parse()
	if *ticks < 1 || *shares < 1 {
		fmt.Fprintln(os.Stderr, "-ticks and -shares must be at least 1")
		os.Exit(2)
	}
	if err := oversubscription(*seed, *shares); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println()
	tiers(*seed, *ticks)
}

// oversubscription allocates shares until the node is full, for each factor.
func oversubscription(seed int64, n int) error {
	classes, err := deployments.DeviceClasses()
	if err != nil {
		return err
	}
	sizes := []int{2, 4, 8, 12, 16, 24} // GiB
	r := rand.New(rand.NewSource(seed))
	want := make([]int, n)
	for i := range want {
		want[i] = sizes[r.Intn(len(sizes))]
	}
	fmt.Printf("Shares of 2-24 GiB (5%% compute each) on one DGX H100, first fit by the real allocator, %d tried:\n", n)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "memory oversubscription\tshares placed\tGiB placed\tx-1")
	base := 0
	for _, f := range []float64{1, 1.25, 1.5, 2} {
		_, slices, err := simulated.Slices("dgx-h100", "node-0", driver.RenderOptions{MemoryOversubscription: f})
		if err != nil {
			return err
		}
		st := allocation.New(classes, slices)
		placed, gib := 0, 0
		for i, g := range want {
			spec, err := allocation.ParseClaimSpec(fmt.Appendf(nil, `
devices:
  requests:
  - name: share
    exactly:
      deviceClassName: gpu-share.gpudra.dev
      capacity: {requests: {memory: %dGi, compute: "5"}}`, g))
			if err != nil {
				return err
			}
			c := &resourceapi.ResourceClaim{Spec: spec}
			c.Name, c.Namespace, c.UID = fmt.Sprintf("share-%d", i), "bench", types.UID(fmt.Sprintf("uid-%g-%d", f, i))
			if _, err := st.AllocateAndCommit(context.Background(), "node-0", c); err != nil {
				continue // this one does not fit; a smaller one later may
			}
			placed++
			gib += g
		}
		if f == 1 {
			base = placed
		}
		fmt.Fprintf(tw, "%g\t%d\t%d\t%.2f\n", f, placed, gib, float64(placed)/float64(max(base, 1)))
	}
	return tw.Flush()
}

type tenant struct {
	request int // percent of the GPU reserved: the floor
	cap     int // percent it may use
	high    bool
}

// tiers runs the model for each configuration of the four tenants.
func tiers(seed int64, ticks int) {
	requests := []int{40, 30, 20, 10}
	fixed := func() []tenant {
		out := make([]tenant, len(requests))
		for i, q := range requests {
			out[i] = tenant{request: q, cap: q}
		}
		return out
	}
	guaranteed := func(limit int) []tenant {
		out := fixed()
		for i := range out {
			out[i].cap = limit
		}
		return out
	}
	highFirst := guaranteed(100)
	highFirst[0].high = true
	configs := []struct {
		name    string
		tenants []tenant
	}{
		{"Fixed", fixed()},
		{"Guaranteed, computeLimit 100", guaranteed(100)},
		{"Guaranteed, computeLimit 60", guaranteed(60)},
		{"Guaranteed 100, the 40 % tenant High", highFirst},
	}
	fmt.Printf("Four tenants with requests 40/30/20/10 %% on one GPU, %d ticks of bursty demand (a model):\n", ticks)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "policy\tGPU utilization %\tx-Fixed\tfloor kept % (40/30/20/10)\tdemand served %")
	var base float64
	for _, c := range configs {
		util, kept, served := simulate(seed, ticks, c.tenants)
		if base == 0 {
			base = util
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.2f\t%.1f / %.1f / %.1f / %.1f\t%.1f\n", c.name, util, util/base, kept[0], kept[1], kept[2], kept[3], served)
	}
	tw.Flush()
}

// simulate returns the mean GPU utilization, per tenant the percent of busy ticks in which
// it got at least min(demand, request), and the percent of all demand served. Every
// configuration sees the same demand (the same seed).
func simulate(seed int64, ticks int, ts []tenant) (util float64, kept []float64, served float64) {
	r := rand.New(rand.NewSource(seed))
	busy := make([]int, len(ts))
	ok := make([]int, len(ts))
	var used, asked float64
	demand := make([]float64, len(ts))
	got := make([]float64, len(ts))
	for range ticks {
		for i := range ts {
			demand[i] = 5
			if r.Float64() < 0.3 {
				demand[i] = 20 + 80*r.Float64()
			}
			asked += min(demand[i], 100)
		}
		share(ts, demand, got)
		for i, t := range ts {
			used += got[i]
			if demand[i] > 5 {
				busy[i]++
				if got[i] >= min(demand[i], float64(t.request))-1e-9 {
					ok[i]++
				}
			}
		}
	}
	kept = make([]float64, len(ts))
	for i := range ts {
		kept[i] = 100 * float64(ok[i]) / float64(max(busy[i], 1))
	}
	return used / float64(ticks), kept, 100 * used / asked
}

// share gives each tenant its demand up to its cap; High tenants first, then the others
// in proportion to their capped demands when those exceed what is left.
func share(ts []tenant, demand, got []float64) {
	left := 100.0
	for _, high := range []bool{true, false} {
		total := 0.0
		for i, t := range ts {
			if t.high == high {
				total += min(demand[i], float64(t.cap))
			}
		}
		scale := 1.0
		if total > left {
			scale = left / total
		}
		for i, t := range ts {
			if t.high == high {
				got[i] = min(demand[i], float64(t.cap)) * scale
			}
		}
		left -= min(total, left)
	}
}

package admission

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/driver/simulated"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// TestShareComputeNeeded: a share may take no larger a part of its card's memory than of
// its compute, the only part of it a queue charges.
func TestShareComputeNeeded(t *testing.T) {
	const gi = int64(1) << 30
	for _, tc := range []struct {
		what         string
		memory, card int64
		compute      string
		need         int64
		ok           bool
	}{
		{"half the memory, a tenth of the compute", 40 * gi, 80 * gi, "10", 50, false},
		{"half the memory, half the compute: equal passes", 40 * gi, 80 * gi, "50", 50, true},
		{"half the memory, more compute", 40 * gi, 80 * gi, "75", 50, true},
		{"half the memory, one percent short", 40 * gi, 80 * gi, "49", 50, false},
		{"uncapped: compute 0 never passes", 256 << 20, 80 * gi, "0", 1, false},
		{"uncapped, the default 1Gi", gi, 80 * gi, "0", 2, false},
		{"1Gi of 80Gi is 1.25 %: 1 is short", gi, 80 * gi, "1", 2, false},
		{"1Gi of 80Gi is 1.25 %: 2 passes", gi, 80 * gi, "2", 2, true},
		{"1Gi of 80Gi: a fractional compute at the exact part passes", gi, 80 * gi, "1.25", 2, true},
		{"1Gi of 80Gi: just under the exact part", gi, 80 * gi, "1.24", 2, false},
		{"the whole card needs all its compute", 80 * gi, 80 * gi, "100", 100, true},
		{"the whole card with 99", 80 * gi, 80 * gi, "99", 100, false},
		{"a card that is not a power of two: 40Gi of 81559Mi", 40 * gi, 81559 << 20, "50", 51, false},
		{"40Gi of 81559Mi with 51", 40 * gi, 81559 << 20, "51", 51, true},
		{"a 48GB card: 24Gi", 24 * gi, 46068 << 20, "53", 54, false},
		{"negative compute counts as none", gi, 80 * gi, "-5", 2, false},
		{"compute written with a suffix: 500m is 0.5", 256 << 20, 80 * gi, "500m", 1, true},
	} {
		need, ok := shareComputeNeeded(tc.memory, tc.card, resource.MustParse(tc.compute))
		if need != tc.need || ok != tc.ok {
			t.Errorf("%s: memory %d of %d, compute %s: need %d ok %v, want need %d ok %v", tc.what, tc.memory, tc.card, tc.compute, need, ok, tc.need, tc.ok)
		}
	}
}

func TestShareFaultMessage(t *testing.T) {
	card := shareCard{memory: 80 << 30, defaultMemory: resource.MustParse("1Gi"), defaultCompute: resource.MustParse("0")}
	req := func(memory, compute string) shareRequest {
		r := shareRequest{path: "devices.requests[0] (gpu)", class: api.DeviceClassShare, capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{}}}
		if memory != "" {
			r.capacity.Requests[api.CapMemory] = resource.MustParse(memory)
		}
		if compute != "" {
			r.capacity.Requests[api.CapCompute] = resource.MustParse(compute)
		}
		return r
	}
	const where = "spec.podSets[0] (workers): ResourceClaimTemplate shared-inference"
	for _, tc := range []struct {
		what string
		req  shareRequest
		want string
	}{
		{"40Gi at compute 10", req("40Gi", "10"),
			"spec.podSets[0] (workers): ResourceClaimTemplate shared-inference: devices.requests[0] (gpu) asks for 40Gi of its card's 80Gi (50 %) but compute 10: " +
				"a queue charges a share only its compute, in gpudra.dev/gpu-percent, so its memory may not be the larger part of the card; ask for compute of at least 50"},
		{"nothing asked: the defaults", shareRequest{path: "devices.requests[0] (gpu)"},
			"devices.requests[0] (gpu) asks for 1Gi (the default) of its card's 80Gi (1.25 %) but compute 0 (the default): "},
		{"compute 0 asked for", req("8Gi", "0"), "asks for 8Gi of its card's 80Gi (10 %) but compute 0 (no cap): "},
		{"memory defaulted, compute too small", req("", "1"), "asks for 1Gi (the default) of its card's 80Gi (1.25 %) but compute 1: "},
	} {
		err := shareFault(where, tc.req, card)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want it to contain %q", tc.what, err, tc.want)
		}
	}
	if err := shareFault(where, req("40Gi", "50"), card); err != nil {
		t.Errorf("40Gi at compute 50 of an 80Gi card: %v, want it to pass", err)
	}
}

// sharedSlices renders the slices of a simulated node's kubelet plugin, each with a UID and
// resourceVersion as the API server gives them.
func sharedSlices(tb testing.TB, profile, node, version string, opts driver.RenderOptions) []*resourceapi.ResourceSlice {
	tb.Helper()
	_, out, err := simulated.Slices(profile, node, opts)
	if err != nil {
		tb.Fatal(err)
	}
	for k, sl := range out {
		sl.UID = types.UID(fmt.Sprintf("%s-%d", node, k))
		sl.ResourceVersion = version
	}
	return out
}

// TestShareCardMemo: before planning, a share is judged on the cluster's largest share card.
// The memo that spares a decision from reading every device must follow slices that change
// or go away, and keep no more than the cluster's slices.
func TestShareCardMemo(t *testing.T) {
	h100 := sharedSlices(t, "dgx-h100", "h100", "1", driver.RenderOptions{})
	l40s := sharedSlices(t, "l40s-pcie", "l40s", "1", driver.RenderOptions{})
	cluster := append(slices.Clone(l40s), h100...)
	var none *shareCardMemo // reads every slice
	h100Card, l40sCard := none.largest(h100).memory, none.largest(l40s).memory
	if h100Card>>30 != 80 || l40sCard <= 0 || l40sCard >= h100Card {
		t.Fatalf("share cards: H100 %d bytes, L40S %d: want 80 GiB and a smaller positive size", h100Card, l40sCard)
	}

	var memo shareCardMemo
	if got := memo.largest(cluster).memory; got != h100Card {
		t.Fatalf("largest share card of an H100 and an L40S node: %d bytes, want the H100's %d", got, h100Card)
	}
	if got := memo.largest(cluster).memory; got != h100Card {
		t.Fatalf("the same slices again, from the memo: %d bytes, want %d", got, h100Card)
	}

	// The H100 node is republished without shares (a new resourceVersion): the L40S's card
	// is now the largest.
	noShares := sharedSlices(t, "dgx-h100", "h100", "2", driver.RenderOptions{NoShares: true})
	if got := memo.largest(append(slices.Clone(l40s), noShares...)).memory; got != l40sCard {
		t.Fatalf("after the H100 node stopped publishing shares: %d bytes, want the L40S's %d", got, l40sCard)
	}

	// Oversubscribed memory makes the device's capacity larger, not the card.
	over := sharedSlices(t, "l40s-pcie", "l40s", "2", driver.RenderOptions{MemoryOversubscription: 2})
	if got := memo.largest(over).memory; got != l40sCard {
		t.Fatalf("an L40S node oversubscribing memory twice: %d bytes, want its card's %d", got, l40sCard)
	}
	if len(memo.bySlice) != len(over) {
		t.Fatalf("the memo keeps %d slices after a call with %d", len(memo.bySlice), len(over))
	}

	// A slice that is not from the API server (no resourceVersion) is read every time and
	// not kept.
	bare := sharedSlices(t, "dgx-h100", "bare", "", driver.RenderOptions{})
	if got := memo.largest(bare).memory; got != h100Card || len(memo.bySlice) != 0 {
		t.Fatalf("slices without a resourceVersion: %d bytes and %d kept, want %d and none", got, len(memo.bySlice), h100Card)
	}
}

// BenchmarkLargestShareCard: what a share's decision pays before planning to find the
// largest share card on 512 DGX H100 nodes publishing everything (4 096 GPUs, 11 776
// devices): every device read into a map, as before the memo, against the memo.
func BenchmarkLargestShareCard(b *testing.B) {
	var all []*resourceapi.ResourceSlice
	for n := range 512 {
		all = append(all, sharedSlices(b, "dgx-h100", fmt.Sprintf("n%03d", n), "1", driver.RenderOptions{})...)
	}
	st := allocation.New(nil, all)
	pools := map[string]bool{}
	for _, sl := range all {
		pools[sl.Spec.Pool.Name] = true
	}
	b.Run("devices", func(b *testing.B) {
		for b.Loop() {
			var largest shareCard
			for _, c := range shareCards(st, pools) {
				if c.memory > largest.memory {
					largest = c
				}
			}
		}
	})
	b.Run("memo", func(b *testing.B) {
		var memo shareCardMemo
		for b.Loop() {
			memo.largest(st.Slices())
		}
	})
}

package admission

import (
	"fmt"
	"math/big"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/queueing/gang"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// Shares under a queue. Kueue charges every gpudra device against one quota resource,
// gpudra.dev/gpu-percent, through the device capacity compute: a whole GPU 100, a MIG device
// the percent of its GPU it takes, a share the compute it asks for. Kueue charges one
// capacity per DeviceClass, so a share's memory costs nothing: a share asking for 1 %
// compute and a whole card's memory would hold the card for 1 % of a queue's quota, and an
// uncapped share (compute 0, the default) for nothing. The check refuses a share that asks
// for a larger part of its card's memory than of its compute.

// quotaGPUPercent is the quota resource Kueue charges gpudra devices against.
const quotaGPUPercent = "gpudra.dev/gpu-percent"

// shareComputeNeeded is the rule: a share asking for memory bytes of a card with card bytes
// of memory must ask for at least the same part of its compute, memory/card <= compute/100.
// need is the smallest whole percent that passes (memory/card in percent, rounded up); ok
// says whether compute passes. card must be positive.
func shareComputeNeeded(memory, card int64, compute resource.Quantity) (need int64, ok bool) {
	m := new(big.Int).Mul(big.NewInt(max(memory, 0)), big.NewInt(100))
	c := big.NewInt(card)
	q, r := new(big.Int).QuoRem(m, c, new(big.Int))
	if r.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	if compute.Sign() < 0 {
		compute = resource.Quantity{}
	}
	// compute*card >= memory*100, compute being unscaled*10^-scale.
	d := compute.AsDec()
	lhs, rhs := new(big.Int).Mul(d.UnscaledBig(), c), m
	if scale := int64(d.Scale()); scale > 0 {
		rhs = new(big.Int).Mul(m, new(big.Int).Exp(big.NewInt(10), big.NewInt(scale), nil))
	} else if scale < 0 {
		lhs.Mul(lhs, new(big.Int).Exp(big.NewInt(10), big.NewInt(-scale), nil))
	}
	return q.Int64(), lhs.Cmp(rhs) >= 0
}

// shareCard is what the rule reads of a share device.
type shareCard struct {
	// memory is the card's memory: the most one share may ask for (the device's memory
	// capacity is larger on a node that oversubscribes memory).
	memory int64
	// defaultMemory and defaultCompute are what a request that names none gets.
	defaultMemory, defaultCompute resource.Quantity
}

// shareCardOf reads a share device; ok is false for other devices.
func shareCardOf(driver string, d *resourceapi.Device) (shareCard, bool) {
	if driver != api.DriverName {
		return shareCard{}, false
	}
	if api.DeviceType(d) != api.TypeShare {
		return shareCard{}, false
	}
	mem, ok := d.Capacity[api.CapMemory]
	if !ok {
		return shareCard{}, false
	}
	card := shareCard{memory: mem.Value.Value()}
	if p := mem.RequestPolicy; p != nil {
		if p.ValidRange != nil && p.ValidRange.Max != nil {
			card.memory = p.ValidRange.Max.Value()
		}
		if p.Default != nil {
			card.defaultMemory = *p.Default
		}
	}
	if c, ok := d.Capacity[api.CapCompute]; ok && c.RequestPolicy != nil && c.RequestPolicy.Default != nil {
		card.defaultCompute = *c.RequestPolicy.Default
	}
	return card, card.memory > 0
}

// deviceKey names a device as an allocation result does.
type deviceKey struct{ driver, pool, device string }

// shareCards are the share devices of the state's slices in the pools named.
func shareCards(st *allocation.State, pools map[string]bool) map[deviceKey]shareCard {
	out := map[deviceKey]shareCard{}
	for _, sl := range st.Slices() {
		if !pools[sl.Spec.Pool.Name] {
			continue
		}
		for k := range sl.Spec.Devices {
			d := &sl.Spec.Devices[k]
			if card, ok := shareCardOf(sl.Spec.Driver, d); ok {
				out[deviceKey{sl.Spec.Driver, sl.Spec.Pool.Name, d.Name}] = card
			}
		}
	}
	return out
}

// shareRequest is one request of a claim, as a share's charge is judged.
type shareRequest struct {
	// path names the request in its claim: devices.requests[0] (gpu).
	path string
	// capacityPath is the field path of its capacity requests in the claim's spec:
	// spec.devices.requests[0].exactly.capacity.requests (request gpu).
	capacityPath string
	class        string
	capacity     *resourceapi.CapacityRequirements
}

// claimRequests indexes a claim's requests and subrequests by the name allocation results
// give them (request, or request/subrequest). extended: the claim kube-scheduler makes for
// extended resources, whose requests are named after the DeviceClass they ask for.
func claimRequests(spec *resourceapi.ResourceClaimSpec, extended bool) map[string]shareRequest {
	out := map[string]shareRequest{}
	for i, r := range spec.Devices.Requests {
		if r.Exactly != nil {
			path := fmt.Sprintf("devices.requests[%d] (%s)", i, r.Name)
			if extended {
				path = "the request for DeviceClass " + r.Exactly.DeviceClassName
			}
			out[r.Name] = shareRequest{path: path, capacityPath: fmt.Sprintf("spec.devices.requests[%d].exactly.capacity.requests (request %s)", i, r.Name),
				class: r.Exactly.DeviceClassName, capacity: r.Exactly.Capacity}
		}
		for j, sub := range r.FirstAvailable {
			out[r.Name+"/"+sub.Name] = shareRequest{path: fmt.Sprintf("devices.requests[%d].firstAvailable[%d] (%s/%s)", i, j, r.Name, sub.Name),
				capacityPath: fmt.Sprintf("spec.devices.requests[%d].firstAvailable[%d].capacity.requests (request %s/%s)", i, j, r.Name, sub.Name),
				class:        sub.DeviceClassName, capacity: sub.Capacity}
		}
	}
	return out
}

// shareFault judges one share request on one card: nil when it passes, otherwise what it
// asks for and the compute that would pass.
func shareFault(where string, req shareRequest, card shareCard) error {
	memory, compute := card.defaultMemory, card.defaultCompute
	memoryNote, computeNote := " (the default)", " (the default)"
	if req.capacity != nil {
		if q, ok := req.capacity.Requests[api.CapMemory]; ok {
			memory, memoryNote = q, ""
		}
		if q, ok := req.capacity.Requests[api.CapCompute]; ok {
			compute, computeNote = q, ""
		}
	}
	need, ok := shareComputeNeeded(memory.Value(), card.memory, compute)
	if ok {
		return nil
	}
	part := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(memory.Value()), big.NewInt(100)), big.NewInt(card.memory))
	pct := strings.TrimSuffix(strings.TrimRight(part.FloatString(2), "0"), ".")
	if compute.IsZero() && computeNote == "" {
		computeNote = " (no cap)"
	}
	return fmt.Errorf("%s: %s asks for %s%s of its card's %s (%s %%) but compute %s%s: a queue charges a share only its compute, in %s, "+
		"so its memory may not be the larger part of the card; ask for compute of at least %d",
		where, req.path, memory.String(), memoryNote, resource.NewQuantity(card.memory, resource.BinarySI).String(), pct,
		compute.String(), computeNote, quotaGPUPercent, need)
}

// claimSource names where each claim of a pod set comes from, in the order podSets gives
// them: its ResourceClaimTemplates, then the claim for its extended resources.
func claimSource(ps *kueue.PodSet, k int) (string, bool) {
	claims := ps.Template.Spec.ResourceClaims
	if k < len(claims) && claims[k].ResourceClaimTemplateName != nil {
		return "ResourceClaimTemplate " + *claims[k].ResourceClaimTemplateName, false
	}
	return "extended resources", true
}

// checkShares refuses a workload with a share that asks for a larger part of its card's
// memory than of its compute (see shareComputeNeeded), each share judged on the card the
// placement p gives it. sets are wl's pod sets as podSets builds them.
func checkShares(wl *kueue.Workload, sets []gang.PodSet, st *allocation.State, p *gang.Placement) error {
	cards := shareCards(st, placedPools(p))
	if len(cards) == 0 {
		return nil
	}
	return forPlacedRequests(wl, sets, p, func(where string, d deviceKey, req shareRequest) error {
		if card, isShare := cards[d]; isShare {
			return shareFault(where, req, card)
		}
		return nil
	})
}

// forPlacedRequests calls check with each device a placement gives the pods of wl's pod sets
// (built by podSets) and the request it serves, where naming the pod set and the claim's
// source; check's error is returned as bad input.
func forPlacedRequests(wl *kueue.Workload, sets []gang.PodSet, p *gang.Placement, check func(where string, d deviceKey, req shareRequest) error) error {
	for i, set := range sets {
		ps := &wl.Spec.PodSets[i]
		for k := range set.Claims {
			source, extended := claimSource(ps, k)
			requests := claimRequests(&set.Claims[k], extended)
			where := fmt.Sprintf("spec.podSets[%d] (%s): %s", i, ps.Name, source)
			for _, pod := range p.Allocations[set.Name] {
				if k >= len(pod) {
					continue
				}
				for _, d := range pod[k].Devices.Results {
					req, found := requests[d.Request]
					if !found {
						continue
					}
					if err := check(where, deviceKey{d.Driver, d.Pool, d.Device}, req); err != nil {
						return badInput{err}
					}
				}
			}
		}
	}
	return nil
}

// checkShareRequests is checkShares before planning: each request for DeviceClass
// gpu-share.gpudra.dev is judged on the largest share card of slices, so that only a share
// that can pass on no card is refused; requests with alternatives (firstAvailable) are left
// to the placement. memo may be nil.
func checkShareRequests(wl *kueue.Workload, sets []gang.PodSet, slices []*resourceapi.ResourceSlice, memo *shareCardMemo) error {
	asks := false
	for _, set := range sets {
		for _, c := range set.Claims {
			for _, r := range c.Devices.Requests {
				asks = asks || (r.Exactly != nil && r.Exactly.DeviceClassName == api.DeviceClassShare)
			}
		}
	}
	if !asks {
		return nil
	}
	largest := memo.largest(slices)
	if largest.memory == 0 {
		return nil
	}
	for i, set := range sets {
		ps := &wl.Spec.PodSets[i]
		for k := range set.Claims {
			source, extended := claimSource(ps, k)
			requests := claimRequests(&set.Claims[k], extended)
			for _, r := range set.Claims[k].Devices.Requests {
				if r.Exactly == nil || r.Exactly.DeviceClassName != api.DeviceClassShare {
					continue
				}
				req := requests[r.Name]
				if req.capacity != nil {
					if q, ok := req.capacity.Requests[api.CapMemory]; ok && q.Value() > largest.memory {
						continue // more than any card holds: the plan says it does not fit
					}
				}
				if err := shareFault(fmt.Sprintf("spec.podSets[%d] (%s): %s", i, ps.Name, source), req, largest); err != nil {
					return badInput{err}
				}
			}
		}
	}
	return nil
}

// largestShareCard is the share card with the most memory among a slice's devices (the
// first on a tie); zero without shares.
func largestShareCard(sl *resourceapi.ResourceSlice) shareCard {
	var out shareCard
	for k := range sl.Spec.Devices {
		if card, ok := shareCardOf(sl.Spec.Driver, &sl.Spec.Devices[k]); ok && card.memory > out.memory {
			out = card
		}
	}
	return out
}

// shareCardMemo remembers the largest share card of each ResourceSlice by its UID and
// resourceVersion, so that a share's decision before planning reads a slice's devices only
// when the slice has changed, not every device of the cluster (11 776 at 4 096 GPUs
// publishing everything). The zero value is ready; it keeps the slices of its last call
// only, so it grows no larger than the cluster.
type shareCardMemo struct {
	mu      sync.Mutex
	bySlice map[types.UID]memoizedCard
}

type memoizedCard struct {
	version string
	card    shareCard
}

// largest is the share card with the most memory among the slices' devices (the first on a
// tie, in the slices' order); zero without shares. m may be nil: every slice is read.
func (m *shareCardMemo) largest(slices []*resourceapi.ResourceSlice) shareCard {
	if m == nil {
		m = &shareCardMemo{}
	}
	var out shareCard
	m.mu.Lock()
	defer m.mu.Unlock()
	next := make(map[types.UID]memoizedCard, len(slices))
	for _, sl := range slices {
		// A slice without a UID or version (not from the API server) is read every time.
		known := sl.UID != "" && sl.ResourceVersion != ""
		c, ok := m.bySlice[sl.UID]
		if !known || !ok || c.version != sl.ResourceVersion {
			c = memoizedCard{version: sl.ResourceVersion, card: largestShareCard(sl)}
		}
		if known {
			next[sl.UID] = c
		}
		if c.card.memory > out.memory {
			out = c.card
		}
	}
	m.bySlice = next
	return out
}

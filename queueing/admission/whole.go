package admission

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/queueing/gang"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// Whole devices under a queue. Kueue charges a request the compute its capacity.requests
// name when they name one, and the device's own compute otherwise. The allocator gives a
// device that does not allow multiple allocations whole, whatever the request asks (the
// API lets only such devices carry a request policy to round requests to): a request for a
// whole GPU with compute "1" would hold the GPU for 1 % of a queue's quota. The check
// refuses a request with capacity requests that gets a gpudra device allocated whole:
// before planning when its DeviceClass is one of gpudra's whole-device classes, and on the
// device the plan gives it for any other class.

// wholeDevices are the gpudra devices of the state's slices that are allocated whole, in
// the pools named, with their compute capacity.
func wholeDevices(st *allocation.State, pools map[string]bool) map[deviceKey]resource.Quantity {
	out := map[deviceKey]resource.Quantity{}
	for _, sl := range st.Slices() {
		if sl.Spec.Driver != api.DriverName || !pools[sl.Spec.Pool.Name] {
			continue
		}
		for k := range sl.Spec.Devices {
			d := &sl.Spec.Devices[k]
			if d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations {
				continue
			}
			out[deviceKey{sl.Spec.Driver, sl.Spec.Pool.Name, d.Name}] = d.Capacity[api.CapCompute].Value
		}
	}
	return out
}

// wholeFault judges one request that gets a device allocated whole (what names it): nil
// when the request names no capacity, otherwise the fault. compute is the device's compute
// capacity, nil when not known yet.
func wholeFault(where string, req shareRequest, what string, compute *resource.Quantity) error {
	if req.capacity == nil || len(req.capacity.Requests) == 0 {
		return nil
	}
	asks := make([]string, 0, len(req.capacity.Requests))
	for name, q := range req.capacity.Requests {
		asks = append(asks, fmt.Sprintf("%s %s", name, q.String()))
	}
	slices.Sort(asks)
	size := "its compute capacity"
	if compute != nil {
		size = "its compute capacity, " + compute.String()
	}
	return fmt.Errorf("%s: %s asks for %s, but it gets %s, which the allocator gives whole whatever capacity it asks: "+
		"a queue charges a whole device by its size (%s, in %s), and Kueue would charge the capacity request instead; "+
		"drop capacity.requests (only %s devices are shared by capacity)",
		where, req.capacityPath, strings.Join(asks, ", "), what, size, quotaGPUPercent, api.DeviceClassShare)
}

// checkWholeRequests refuses, before planning, a request of one of gpudra's whole-device
// DeviceClasses that asks for capacity. sets are wl's pod sets as podSets builds them.
func checkWholeRequests(wl *kueue.Workload, sets []gang.PodSet) error {
	for i, set := range sets {
		ps := &wl.Spec.PodSets[i]
		for k := range set.Claims {
			source, extended := claimSource(ps, k)
			requests := claimRequests(&set.Claims[k], extended)
			for _, name := range slices.Sorted(maps.Keys(requests)) {
				req := requests[name]
				if !api.WholeDeviceClass(req.class) {
					continue
				}
				if err := wholeFault(fmt.Sprintf("spec.podSets[%d] (%s): %s", i, ps.Name, source), req, "a device of DeviceClass "+req.class, nil); err != nil {
					return badInput{err}
				}
			}
		}
	}
	return nil
}

// checkWholePlaced refuses a request that asks for capacity and that the placement gives a
// gpudra device allocated whole, whatever its DeviceClass.
func checkWholePlaced(wl *kueue.Workload, sets []gang.PodSet, st *allocation.State, p *gang.Placement) error {
	pools := placedPools(p)
	devices := wholeDevices(st, pools)
	if len(devices) == 0 {
		return nil
	}
	return forPlacedRequests(wl, sets, p, func(where string, d deviceKey, req shareRequest) error {
		compute, whole := devices[d]
		if !whole {
			return nil
		}
		return wholeFault(where, req, fmt.Sprintf("device %s of pool %s", d.device, d.pool), &compute)
	})
}

// placedPools are the pools a placement takes devices from.
func placedPools(p *gang.Placement) map[string]bool {
	pools := map[string]bool{}
	for _, pods := range p.Allocations {
		for _, pod := range pods {
			for _, a := range pod {
				for _, d := range a.Devices.Results {
					pools[d.Pool] = true
				}
			}
		}
	}
	return pools
}

// refusedBeforePlanning is what the check refuses before planning: a share that no card
// lets pass, a capacity request of a whole-device class. memo may be nil.
func refusedBeforePlanning(wl *kueue.Workload, sets []gang.PodSet, st *allocation.State, memo *shareCardMemo) error {
	if err := checkWholeRequests(wl, sets); err != nil {
		return err
	}
	return checkShareRequests(wl, sets, st.Slices(), memo)
}

// refusedAsPlaced is what the check refuses of a placement: a capacity request on a device
// allocated whole, a share whose card does not let it pass.
func refusedAsPlaced(wl *kueue.Workload, sets []gang.PodSet, st *allocation.State, p *gang.Placement) error {
	if err := checkWholePlaced(wl, sets, st, p); err != nil {
		return err
	}
	return checkShares(wl, sets, st, p)
}

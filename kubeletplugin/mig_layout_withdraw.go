package kubeletplugin

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// A GPU a MIG layout is about to repartition keeps no published device: the scheduler
// could otherwise allocate one between the plugin's read of the allocated claims and the
// repartition, and that claim would be stranded. The layout withdraws the GPUs' devices
// from the node's ResourceSlices, waits until the API server has the slices without them,
// and reads the allocated claims again; a claim found on a withdrawn GPU then gives the
// layout up and brings the devices back. Meanwhile prepare refuses the GPUs' devices.

// withdrawTimeout bounds the wait for the API server to hold the slices without the
// withdrawn devices.
const withdrawTimeout = 30 * time.Second

// repartitioning are the GPUs whose devices are withdrawn for a MIG layout. It has a lock
// of its own: publishing reads it under the driver's lock, prepare under the state's.
type repartitioning struct {
	mu     sync.Mutex
	layout string
	gpus   map[int]bool
}

// start withdraws gpus for layout.
func (r *repartitioning) start(layout string, gpus map[int]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.layout, r.gpus = layout, maps.Clone(gpus)
}

// end gives the GPUs back, and says whether any were withdrawn.
func (r *repartitioning) end() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	had := len(r.gpus) > 0
	r.layout, r.gpus = "", nil
	return had
}

// withdrawn are the GPUs withdrawn now, and the layout that withdrew them.
func (r *repartitioning) withdrawn() (string, map[int]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.layout, maps.Clone(r.gpus)
}

// refuse refuses devices on a withdrawn GPU: their GPU is about to be repartitioned.
func (r *repartitioning) refuse(planned []prepared.Device) error {
	layout, gpus := r.withdrawn()
	for _, dv := range planned {
		for _, gpu := range dv.GPUs {
			if gpus[gpu] {
				return fmt.Errorf("device %s is on GPU %d, which MIG layout %q is repartitioning: its devices are withdrawn from the node's ResourceSlices until the layout is applied or given up; try again then", dv.Device, gpu, layout)
			}
		}
	}
	return nil
}

// withoutGPUs is pool without the devices on gpus (named as nameGPUs reads them); a slice
// left with neither devices nor counters is dropped.
func withoutGPUs(pool *driver.Pool, gpus map[int]bool) *driver.Pool {
	if len(gpus) == 0 {
		return pool
	}
	out := &driver.Pool{}
	for _, s := range pool.Slices {
		kept := slices.DeleteFunc(slices.Clone(s.Devices), func(dev resourceapi.Device) bool {
			return slices.ContainsFunc(nameGPUs(dev.Name), func(gpu int) bool { return gpus[gpu] })
		})
		if len(kept) == 0 && len(s.SharedCounters) == 0 && len(s.Devices) > 0 {
			continue
		}
		s.Devices = kept
		out.Slices = append(out.Slices, s)
	}
	return out
}

// withdrawForLayout republishes the node's devices without those of gpus, which
// layout name withdrew (repartitioning.start), waits until the API server's slices lack
// them, and reads the allocated claims again. On an error, or a claim allocated on one
// of gpus meanwhile, the devices are published again and the layout is not applied.
func (d *Driver) withdrawForLayout(ctx context.Context, name string, gpus map[int]bool) (allocated map[int][]string, err error) {
	logger := klog.FromContext(ctx)
	defer func() {
		if err != nil {
			d.giveBackWithdrawn(ctx)
		}
	}()
	list := gpuList(gpus)
	logger.Info("Withdrawing the devices of the GPUs a MIG layout repartitions", "layout", name, "gpus", list)
	if err := d.republish(ctx); err != nil {
		return nil, fmt.Errorf("MIG layout %q is not applied and no GPU was changed: withdrawing the devices of GPUs %s: %w", name, list, err)
	}
	if err := d.awaitWithdrawn(ctx, gpus); err != nil {
		return nil, fmt.Errorf("MIG layout %q is not applied and no GPU was changed: %w; the devices are published again", name, err)
	}
	if allocated, err = d.allocatedGPUs(ctx); err != nil {
		return nil, fmt.Errorf("MIG layout %q is not applied and no GPU was changed: reading the ResourceClaims allocated on the node's devices again after withdrawing GPUs %s: %w", name, list, err)
	}
	var late []string
	for _, gpu := range slices.Sorted(maps.Keys(gpus)) {
		if claims := allocated[gpu]; len(claims) > 0 {
			late = append(late, fmt.Sprintf("GPU %d (claims %s)", gpu, strings.Join(claims, ", ")))
		}
	}
	if len(late) > 0 {
		return nil, fmt.Errorf("MIG layout %q is not applied and no GPU was changed: claims were allocated on GPUs it was about to repartition, before their devices were withdrawn: %s; the devices are published again, and the layout waits for those claims",
			name, strings.Join(late, ", "))
	}
	return allocated, nil
}

// giveBackWithdrawn publishes the withdrawn devices again.
func (d *Driver) giveBackWithdrawn(ctx context.Context) {
	if !d.state.repartitioning.end() {
		return
	}
	if err := d.republish(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Publishing the devices a MIG layout withdrew failed; the next republish brings them back")
	}
}

// awaitWithdrawn waits until no ResourceSlice of the node's pool on the API server holds
// a device of gpus.
func (d *Driver) awaitWithdrawn(ctx context.Context, gpus map[int]bool) error {
	if d.helper == nil { // nothing is published
		return nil
	}
	selector := fields.Set{resourceapi.ResourceSliceSelectorNodeName: d.cfg.NodeName, resourceapi.ResourceSliceSelectorDriver: api.DriverName}.String()
	var left []string
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, withdrawTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := d.cfg.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			lastErr = err
			return false, nil
		}
		left, lastErr = left[:0], nil
		for _, s := range list.Items {
			if s.Spec.Driver != api.DriverName || s.Spec.Pool.Name != d.cfg.NodeName {
				continue
			}
			for _, dev := range s.Spec.Devices {
				if slices.ContainsFunc(nameGPUs(dev.Name), func(gpu int) bool { return gpus[gpu] }) {
					left = append(left, dev.Name)
				}
			}
		}
		return len(left) == 0, nil
	})
	switch {
	case err == nil:
		return nil
	case lastErr != nil:
		return fmt.Errorf("reading the node's ResourceSlices to see the devices of GPUs %s withdrawn: %w", gpuList(gpus), lastErr)
	default:
		slices.Sort(left)
		return fmt.Errorf("the API server still publishes %s after %s", strings.Join(left, ", "), withdrawTimeout)
	}
}

// gpuList is gpus as "0, 2, 5".
func gpuList(gpus map[int]bool) string {
	var out []string
	for _, gpu := range slices.Sorted(maps.Keys(gpus)) {
		out = append(out, fmt.Sprint(gpu))
	}
	return strings.Join(out, ", ")
}

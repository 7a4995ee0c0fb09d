package kubeletplugin

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// gpuUsers are the GPUs prepared claims use, with the claims; s is locked.
func (s *state) gpuUsers() map[int][]string {
	out := map[int][]string{}
	for _, pc := range s.cp.Claims {
		ref := klog.KRef(pc.Namespace, pc.Name).String()
		for _, dv := range pc.Devices {
			for _, gpu := range dv.GPUs {
				if !slices.Contains(out[gpu], ref) {
					out[gpu] = append(out[gpu], ref)
				}
			}
		}
	}
	for gpu := range out {
		slices.Sort(out[gpu])
	}
	return out
}

const (
	// claimListPage is how many ResourceClaims one List call reads.
	claimListPage = 500
	// claimListTimeout bounds reading them all.
	claimListTimeout = time.Minute
)

// allocatedGPUs are the GPUs of the node that ResourceClaims are allocated on, with the
// claims: every claim whose status.allocation holds a device of this driver in this node's
// pool, whether or not it is prepared yet. The claims are read a page at a time.
func (d *Driver) allocatedGPUs(ctx context.Context) (map[int][]string, error) {
	ctx, cancel := context.WithTimeout(ctx, claimListTimeout)
	defer cancel()
	out := map[int][]string{}
	opts := metav1.ListOptions{Limit: claimListPage}
	for {
		list, err := d.cfg.Client.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for k := range list.Items {
			c := &list.Items[k]
			if c.Status.Allocation == nil {
				continue
			}
			ref := klog.KObj(c).String()
			for _, r := range c.Status.Allocation.Devices.Results {
				if r.Driver != api.DriverName || r.Pool != d.cfg.NodeName {
					continue
				}
				for _, gpu := range deviceGPUs(r) {
					if !slices.Contains(out[gpu], ref) {
						out[gpu] = append(out[gpu], ref)
					}
				}
			}
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			break
		}
	}
	for gpu := range out {
		slices.Sort(out[gpu])
	}
	return out, nil
}

// deviceGPUs are the GPU indices an allocated device uses, read from its name
// (nameGPUs), so that a device published before a change of layout still counts.
func deviceGPUs(r resourceapi.DeviceRequestAllocationResult) []int {
	return nameGPUs(r.Device)
}

// nameGPUs are the GPU indices a device of this driver named name uses: a whole GPU, a
// share, a MIG device: gpu-<index>...; an NVLink group: nvlink-<i>-<j>....
func nameGPUs(name string) []int {
	if rest, ok := strings.CutPrefix(name, "gpu-"); ok {
		num, _, _ := strings.Cut(rest, "-")
		if i, err := strconv.Atoi(num); err == nil {
			return []int{i}
		}
		return nil
	}
	rest, ok := strings.CutPrefix(name, "nvlink-")
	if !ok {
		return nil
	}
	var out []int
	for _, s := range strings.Split(rest, "-") {
		if i, err := strconv.Atoi(s); err == nil {
			out = append(out, i)
		}
	}
	return out
}

package admission

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

var (
	nodeGPUsDesc = prometheus.NewDesc("gpudra_node_gpus",
		"Whole GPUs the node publishes (gpu devices in its ResourceSlices).", []string{"node"}, nil)
	nodeGPUsFreeDesc = prometheus.NewDesc("gpudra_node_gpus_free",
		"Whole GPUs of the node a claim can get now: nothing allocated on them (no whole, shared, MIG or NVLink group use) and no NoSchedule or NoExecute device taint.",
		[]string{"node"}, nil)
	nvlinkGroupFreeDesc = prometheus.NewDesc("gpudra_nvlink_group_free",
		"1 when the NVLink group device can be allocated now (none of its GPUs in use, no NoSchedule or NoExecute device taint), else 0.",
		[]string{"node", "group"}, nil)
)

// collectTimeout bounds one scrape's reads (from the informer cache, so normally instant).
const collectTimeout = 10 * time.Second

// Capacity is a Prometheus collector of free GPU capacity per node and per NVLink group,
// computed at scrape time from the ResourceSlices and allocated ResourceClaims the
// client reads (the manager's cache). Devices of gangs the check admitted whose pods are
// not bound yet still count as free: the metrics show the cluster's allocations.
type Capacity struct {
	Client client.Reader
}

// Describe sends the metrics' descriptions.
func (c *Capacity) Describe(ch chan<- *prometheus.Desc) {
	ch <- nodeGPUsDesc
	ch <- nodeGPUsFreeDesc
	ch <- nvlinkGroupFreeDesc
}

// Collect reads the cluster's DRA state and sends the gauges.
func (c *Capacity) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
	defer cancel()
	st, _, err := liveState(ctx, c.Client)
	if err != nil {
		// An invalid metric would fail the whole scrape, the other metrics with it.
		log.Log.WithName("capacity").Error(err, "Reading the DRA state for the capacity metrics")
		return
	}
	usage := st.Usage()
	gpus, free := map[string]int{}, map[string]int{}
	for _, sl := range current(st.Slices()) {
		node := *sl.Spec.NodeName
		for _, dev := range sl.Spec.Devices {
			available := !usage.InUse(sl.Spec.Driver, sl.Spec.Pool.Name, dev) && !untolerated(dev.Taints)
			switch api.DeviceType(&dev) {
			case api.TypeGPU:
				gpus[node]++
				if available {
					free[node]++
				}
			case api.TypeNVLinkGroup:
				ch <- prometheus.MustNewConstMetric(nvlinkGroupFreeDesc, prometheus.GaugeValue, boolValue(available), node, dev.Name)
			}
		}
	}
	for node, n := range gpus {
		ch <- prometheus.MustNewConstMetric(nodeGPUsDesc, prometheus.GaugeValue, float64(n), node)
		ch <- prometheus.MustNewConstMetric(nodeGPUsFreeDesc, prometheus.GaugeValue, float64(free[node]), node)
	}
}

// current keeps gpudra's node-local slices of each pool's newest generation: while a node
// republishes, the slices of the generation it replaces are still listed.
func current(slices []*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	newest := map[string]int64{}
	for _, sl := range slices {
		if sl.Spec.Driver == api.DriverName {
			newest[sl.Spec.Pool.Name] = max(newest[sl.Spec.Pool.Name], sl.Spec.Pool.Generation)
		}
	}
	var out []*resourceapi.ResourceSlice
	for _, sl := range slices {
		if sl.Spec.Driver == api.DriverName && sl.Spec.NodeName != nil && sl.Spec.Pool.Generation == newest[sl.Spec.Pool.Name] {
			out = append(out, sl)
		}
	}
	return out
}

// untolerated reports whether a device taint keeps claims without tolerations off it.
func untolerated(taints []resourceapi.DeviceTaint) bool {
	for _, t := range taints {
		if t.Effect == resourceapi.DeviceTaintEffectNoSchedule || t.Effect == resourceapi.DeviceTaintEffectNoExecute {
			return true
		}
	}
	return false
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

package kubeletplugin

import (
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpudra/gpudra/driver"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// The per-GPU metrics, labelled by the GPU's index (gpu) as the devices' index attribute
// has it.
var (
	gpuInfoDesc = prometheus.NewDesc("gpudra_plugin_gpu_info",
		"1 for each GPU of the node the plugin publishes, with its UUID, model (its product name), MIG mode as the plugin knows it (enabled, disabled, or unsupported for GPUs without MIG) and vendor (nvidia, amd, hygon).",
		[]string{"gpu", "uuid", "model", "mig_mode", "vendor"}, nil)
	gpuMemoryDesc = prometheus.NewDesc("gpudra_plugin_gpu_memory_bytes",
		"Memory of the GPU.", []string{"gpu"}, nil)
	gpuClaimsDesc = prometheus.NewDesc("gpudra_plugin_gpu_claims",
		"Claims prepared on this node (checkpoint entries) with a device on the GPU, by the device's type (gpu, share, mig, nvlink-group; a MIG device counts on its parent, an NVLink group on each of its GPUs).",
		[]string{"gpu", "type"}, nil)
	gpuShareMemoryDesc = prometheus.NewDesc("gpudra_plugin_gpu_share_memory_bytes",
		"GPU memory the prepared shares of the GPU hold (the memory capacity their claims consumed).",
		[]string{"gpu"}, nil)
	gpuShareComputeDesc = prometheus.NewDesc("gpudra_plugin_gpu_share_compute_percent",
		"Compute the prepared shares of the GPU hold, in percent of the GPU (the compute capacity their claims consumed; 100 is the whole GPU).",
		[]string{"gpu"}, nil)
)

// deviceTypesOrder is the order of gpudra_plugin_gpu_claims' type label values; each GPU
// has a series for each, 0 when no claim uses it that way.
var deviceTypesOrder = []string{api.TypeGPU, api.TypeShare, api.TypeMIG, api.TypeNVLinkGroup, api.TypeXGMIGroup}

// gpuCollector computes the per-GPU metrics at scrape time from the plugin's inventory
// and the prepared claims of its checkpoint, under the state's lock.
type gpuCollector struct {
	state *state
}

// Describe sends the metrics' descriptions.
func (c gpuCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{gpuInfoDesc, gpuMemoryDesc, gpuClaimsDesc, gpuShareMemoryDesc, gpuShareComputeDesc} {
		ch <- d
	}
}

// gpuUse is what the prepared claims hold on one GPU.
type gpuUse struct {
	claims      map[string]int // by device type
	shareMemory int64
	shareComp   int
	migMode     string // "enabled" or "disabled" when a prepared device says; "" when none does
}

// Collect sends the per-GPU metrics.
func (c gpuCollector) Collect(ch chan<- prometheus.Metric) {
	for _, g := range c.state.gpuUsage() {
		idx := strconv.Itoa(g.gpu.Index)
		ch <- prometheus.MustNewConstMetric(gpuInfoDesc, prometheus.GaugeValue, 1, idx, g.gpu.UUID, g.gpu.ProductName, g.migMode, g.gpu.VendorOf())
		ch <- prometheus.MustNewConstMetric(gpuMemoryDesc, prometheus.GaugeValue, float64(g.gpu.MemoryBytes), idx)
		for _, t := range deviceTypesOrder {
			ch <- prometheus.MustNewConstMetric(gpuClaimsDesc, prometheus.GaugeValue, float64(g.use.claims[t]), idx, t)
		}
		ch <- prometheus.MustNewConstMetric(gpuShareMemoryDesc, prometheus.GaugeValue, float64(g.use.shareMemory), idx)
		ch <- prometheus.MustNewConstMetric(gpuShareComputeDesc, prometheus.GaugeValue, float64(g.use.shareComp), idx)
	}
}

// gpuUsage is one GPU of the inventory and what the prepared claims hold on it.
type gpuUsage struct {
	gpu     driver.GPU
	migMode string
	use     gpuUse
}

// gpuUsage reads the inventory's GPUs and the checkpoint's claims under the state's lock
// (a MIG layout refresh replaces a GPU's MIG info under it).
func (s *state) gpuUsage() []gpuUsage {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.planner == nil || s.planner.inv == nil {
		return nil
	}
	out := make([]gpuUsage, 0, len(s.planner.inv.GPUs))
	at := map[int]int{} // GPU index → position in out
	for _, g := range s.planner.inv.GPUs {
		at[g.Index] = len(out)
		u := gpuUsage{gpu: g, use: gpuUse{claims: map[string]int{}}}
		if g.MIG != nil {
			u.gpu.MIG = &driver.MIGInfo{Enabled: g.MIG.Enabled} // only the mode is read
		}
		out = append(out, u)
	}
	if s.cp != nil {
		for _, pc := range s.cp.Claims {
			counted := map[int][]string{} // GPU index → types this claim was counted for
			for _, d := range pc.Devices {
				for _, idx := range d.GPUs {
					k, ok := at[idx]
					if !ok {
						continue
					}
					u := &out[k].use
					if !slices.Contains(counted[idx], d.Type) {
						counted[idx] = append(counted[idx], d.Type)
						u.claims[d.Type]++
					}
					switch d.Type {
					case api.TypeShare:
						u.shareMemory += d.CDI.MemoryBytes
						u.shareComp += d.CDI.ComputePercent
					}
					switch {
					case d.MIG != nil:
						u.migMode = "enabled"
					case s.dynamic && u.migMode == "":
						// Dynamic MIG turns MIG mode off on a GPU it prepares whole or shared.
						u.migMode = "disabled"
					}
				}
			}
		}
	}
	for k := range out {
		out[k].migMode = migModeLabel(out[k].gpu, out[k].use.migMode)
	}
	return out
}

// migModeLabel is the mig_mode label of a GPU: unsupported without MIG, else what its
// prepared devices imply (prepared), else its mode as discovered.
func migModeLabel(g driver.GPU, prepared string) string {
	switch {
	case g.MIG == nil:
		return "unsupported"
	case prepared != "":
		return prepared
	case g.MIG.Enabled:
		return "enabled"
	}
	return "disabled"
}

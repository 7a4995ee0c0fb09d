package usage

import (
	"context"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// The usage metrics: what the processes of each prepared claim use on each GPU, against
// what the claim holds there, and what all processes of each GPU use.
var (
	claimUsageLabels     = []string{"namespace", "claim", "gpu"}
	claimMemoryUsedDesc  = prometheus.NewDesc("gpudra_plugin_claim_memory_used_bytes", "GPU memory the processes of the prepared claim use on the GPU (NVML's per-process used memory).", claimUsageLabels, nil)
	claimMemoryLimitDesc = prometheus.NewDesc("gpudra_plugin_claim_memory_limit_bytes", "GPU memory the prepared claim holds on the GPU: its share's memory, or the device's.", claimUsageLabels, nil)
	claimSMUtilDesc      = prometheus.NewDesc("gpudra_plugin_claim_sm_utilization_percent", "SM utilization of the prepared claim's processes on the GPU, in percent of the GPU (absent where NVML does not sample per-process utilization, as under MIG).", claimUsageLabels, nil)
	claimProcessesDesc   = prometheus.NewDesc("gpudra_plugin_claim_processes", "Compute processes of the prepared claim on the GPU.", claimUsageLabels, nil)
	claimGuaranteeDesc   = prometheus.NewDesc("gpudra_plugin_claim_compute_guarantee_percent", "Compute the prepared claim's shares of the GPU reserve, in percent of the GPU (shares only).", claimUsageLabels, nil)
	claimCapDesc         = prometheus.NewDesc("gpudra_plugin_claim_compute_cap_percent", "Compute the prepared claim's shares of the GPU may use, in percent of the GPU (shares only; 100 without a cap).", claimUsageLabels, nil)
	claimHeldBackDesc    = prometheus.NewDesc("gpudra_plugin_claim_held_back_seconds_total", "Time the prepared claim's Low-priority share, enforced by HAMi-core, had processes on the GPU while a High-priority HAMi-core share there was busy: what HAMi-core's priority held back. Counted between consecutive usage samples that both saw it (Low HAMi-core shares only).", claimUsageLabels, nil)
	gpuMemoryUsedDesc    = prometheus.NewDesc("gpudra_plugin_gpu_memory_used_bytes", "GPU memory all compute processes of the GPU use.", []string{"gpu"}, nil)
	gpuSMUtilDesc        = prometheus.NewDesc("gpudra_plugin_gpu_sm_utilization_percent", "SM utilization of all compute processes of the GPU, in percent (absent where NVML does not sample per-process utilization).", []string{"gpu"}, nil)
	gpuUnclaimedDesc     = prometheus.NewDesc("gpudra_plugin_gpu_unclaimed_processes", "Compute processes of the GPU that belong to no prepared claim.", []string{"gpu"}, nil)
)

// collector samples the GPUs' processes at scrape time (at most every usageCacheAge).
// Without a sampler it describes the metrics and collects none.
type collector struct {
	sampler *Sampler
}

// NewCollector is the usage metrics' collector, which samples with s (nil: none).
func NewCollector(s *Sampler) prometheus.Collector { return collector{sampler: s} }

// Describe sends the metrics' descriptions.
func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{claimMemoryUsedDesc, claimMemoryLimitDesc, claimSMUtilDesc, claimProcessesDesc,
		claimGuaranteeDesc, claimCapDesc, claimHeldBackDesc, gpuMemoryUsedDesc, gpuSMUtilDesc, gpuUnclaimedDesc} {
		ch <- d
	}
}

// Collect sends the usage metrics of the latest sample.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	if c.sampler == nil {
		return
	}
	snap := c.sampler.Snapshot(context.Background())
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, u := range snap.claims {
		l := []string{u.Namespace, u.Name, strconv.Itoa(u.GPU)}
		if u.MemoryKnown {
			gauge(claimMemoryUsedDesc, float64(u.MemoryUsed), l...)
		}
		gauge(claimMemoryLimitDesc, float64(u.MemoryLimit), l...)
		gauge(claimProcessesDesc, float64(u.Processes), l...)
		if u.SMKnown {
			gauge(claimSMUtilDesc, float64(u.SMUtil), l...)
		}
		if u.Share {
			gauge(claimGuaranteeDesc, float64(u.Guarantee), l...)
			gauge(claimCapDesc, float64(u.Cap), l...)
		}
		if u.Share && u.HAMi && u.Priority == string(api.PriorityLow) {
			ch <- prometheus.MustNewConstMetric(claimHeldBackDesc, prometheus.CounterValue, u.HeldBack.Seconds(), l...)
		}
	}
	for _, g := range snap.gpus {
		idx := strconv.Itoa(g.GPU)
		if g.MemoryKnown {
			gauge(gpuMemoryUsedDesc, float64(g.MemoryUsed), idx)
		}
		gauge(gpuUnclaimedDesc, float64(g.Unclaimed), idx)
		if g.SMKnown {
			gauge(gpuSMUtilDesc, float64(g.SMUtil), idx)
		}
	}
}

package kubeletplugin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/internal/buildinfo"
	"github.com/gpudra/gpudra/kubeletplugin/internal/loop"
	"github.com/gpudra/gpudra/kubeletplugin/usage"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// metrics are one plugin's Prometheus metrics, in a registry of its own (so that
// plugins started side by side in one process, as in tests, count apart).
type metrics struct {
	registry           *prometheus.Registry
	publishedDevices   *prometheus.GaugeVec
	unhealthyGPUs      prometheus.Gauge
	unreadableGPUs     *prometheus.GaugeVec
	prepareSeconds     *prometheus.HistogramVec
	prepareErrors      *prometheus.CounterVec
	unprepareSeconds   prometheus.Histogram
	unprepareErrors    prometheus.Counter
	healthEvents       *prometheus.CounterVec
	checkpointsRecover prometheus.Counter
	repairFailures     *prometheus.CounterVec
	unrepairedClaims   prometheus.Gauge
	// collectors are what registry holds.
	collectors []prometheus.Collector
}

// latencyBuckets span a CDI spec write (under a millisecond) to a MIG mode switch.
var latencyBuckets = prometheus.ExponentialBuckets(0.0005, 2, 16)

func newMetrics(st *state, sampler *usage.Sampler) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		publishedDevices: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpudra_plugin_published_devices",
			Help: "Devices this node publishes in its ResourceSlices, by type (gpu, share, mig, nvlink-group).",
		}, []string{"type"}),
		unhealthyGPUs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gpudra_plugin_unhealthy_gpus",
			Help: "GPUs whose devices are published with the gpu.gpudra.dev/unhealthy taint.",
		}),
		unreadableGPUs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpudra_plugin_unreadable_gpus",
			Help: "GPUs that NVML lists but the plugin's discovery could not read, none of whose devices is published: 1 per GPU, by index, the NVML call that failed and its return code.",
		}, []string{"gpu", "call", "return"}),
		prepareSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gpudra_plugin_prepare_seconds",
			Help:    "Time to prepare one claim (MIG instances, CDI spec, checkpoint), by the type of its devices (gpu, share, mig, nvlink-group, mixed).",
			Buckets: latencyBuckets,
		}, []string{"type"}),
		prepareErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpudra_plugin_prepare_errors_total",
			Help: "Claims whose prepare failed, by the type of their devices.",
		}, []string{"type"}),
		unprepareSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gpudra_plugin_unprepare_seconds",
			Help:    "Time to unprepare one claim.",
			Buckets: latencyBuckets,
		}),
		unprepareErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpudra_plugin_unprepare_errors_total",
			Help: "Claims whose unprepare failed.",
		}),
		healthEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpudra_plugin_health_events_total",
			Help: "NVML health events received, by kind (xid, double-bit-ecc, gpu-unavailable, gpu-lost, other) and the taint effect they led to (None when ignored, e.g. application XIDs).",
		}, []string{"kind", "effect"}),
		checkpointsRecover: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpudra_plugin_corrupt_checkpoints_recovered_total",
			Help: "Corrupt checkpoints set aside and rebuilt from the CDI specs on disk.",
		}),
		repairFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpudra_plugin_repair_failures_total",
			Help: "Failed tries to restore part of a prepared claim (at start-up or in the background), or to finish a claim's rollback or unprepare, by part (mig-instance, time-slice, mps-daemon, cdi-spec, checkpoint, rollback, unprepare). The claim stays prepared and is tried again.",
		}, []string{"part"}),
		unrepairedClaims: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gpudra_plugin_unrepaired_claims",
			Help: "Claims with a repair pending in the background: a part that could not be restored, an MPS control daemon that exited, a rollback or unprepare not finished.",
		}),
	}
	m.collectors = []prometheus.Collector{
		m.publishedDevices, m.unhealthyGPUs, m.unreadableGPUs, m.prepareSeconds, m.prepareErrors,
		m.unprepareSeconds, m.unprepareErrors, m.healthEvents, m.checkpointsRecover,
		m.repairFailures, m.unrepairedClaims,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gpudra_plugin_prepared_claims",
			Help: "Claims prepared on this node (checkpoint entries).",
		}, st.preparedClaims),
		gpuCollector{state: st},
		usage.NewCollector(sampler),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildinfo.NewCollector(),
	}
	m.registry.MustRegister(m.collectors...)
	return m
}

// published records what a pool publishes.
func (m *metrics) published(pool *driver.Pool) {
	count := map[string]int{api.TypeGPU: 0, api.TypeShare: 0, api.TypeMIG: 0, api.TypeNVLinkGroup: 0, api.TypeXGMIGroup: 0}
	for _, s := range pool.Slices {
		for _, d := range s.Devices {
			count[deviceType(d)]++
		}
	}
	for t, n := range count {
		m.publishedDevices.WithLabelValues(t).Set(float64(n))
	}
}

func deviceType(d resourceapi.Device) string {
	if t := driver.DeviceType(d); t != "" {
		return t
	}
	return "unknown"
}

// claimType is the metrics label of a claim: the type of its gpudra devices, "mixed"
// when they differ, "unknown" when none is published here.
func claimType(claim *resourceapi.ResourceClaim, types map[string]string) string {
	var seen []string
	if claim.Status.Allocation != nil {
		for _, r := range claim.Status.Allocation.Devices.Results {
			if t, ok := types[r.Device]; ok && r.Driver == api.DriverName && !slices.Contains(seen, t) {
				seen = append(seen, t)
			}
		}
	}
	switch len(seen) {
	case 0:
		return "unknown"
	case 1:
		return seen[0]
	}
	return "mixed"
}

// deviceTypes maps each published device name to its type.
func deviceTypes(pool *driver.Pool) map[string]string {
	out := map[string]string{}
	for _, s := range pool.Slices {
		for _, d := range s.Devices {
			out[d.Name] = deviceType(d)
		}
	}
	return out
}

// preparedClaims counts the claims in this instance's view of the checkpoint.
func (s *state) preparedClaims() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cp == nil {
		return 0
	}
	return float64(len(s.cp.Claims))
}

// MetricsHandler serves the plugin's metrics in the Prometheus exposition format.
func (d *Driver) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(d.metrics.registry, promhttp.HandlerOpts{Registry: d.metrics.registry})
}

// ServeMetrics serves /metrics, and the probes /readyz (Ready) and /livez (Live), on
// address (host:port; port 0 picks one) until ctx ends, to the callers access allows
// (HTTPS, or plain HTTP), and returns the address it listens on. An address in use is not
// fatal: in the host's network, a rolling update's new plugin starts while the old one
// still holds the port, so ServeMetrics returns nil and keeps trying in the background
// until it gets it.
func (d *Driver) ServeMetrics(ctx context.Context, address string, access MetricsAccess) (net.Addr, error) {
	logger := klog.FromContext(ctx)
	var metrics http.Handler = d.MetricsHandler()
	var tlsConfig *tls.Config
	if access.secure() {
		var err error
		if metrics, err = access.authorized(metrics, logger); err != nil {
			return nil, err
		}
		if tlsConfig, err = access.tlsConfig(); err != nil {
			return nil, err
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics)
	mux.Handle("/readyz", ProbeHandler(d.Ready))
	mux.Handle("/livez", ProbeHandler(func(context.Context) error { return d.Live() }))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsConfig}
	serve := func(l net.Listener) {
		go func() {
			<-ctx.Done()
			shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(shutdown)
		}()
		go func() {
			var err error
			if tlsConfig != nil {
				err = srv.ServeTLS(l, "", "")
			} else {
				err = srv.Serve(l)
			}
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error(err, "Serving metrics failed", "address", l.Addr().String())
			}
		}()
	}
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", address)
	if err == nil {
		serve(l)
		return l.Addr(), nil
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("metrics bind address %q: %w", address, err)
	}
	logger.Info("Metrics address in use (another plugin of this node, e.g. during a rolling update); serving metrics once it is free", "address", address)
	go loop.After(ctx, metricsRetryInterval, func(ctx context.Context) (done bool) {
		l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", address)
		if err == nil {
			logger.Info("Serving metrics", "address", l.Addr().String(), "https", tlsConfig != nil)
			serve(l)
			return true
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			logger.Error(err, "Metrics bind address", "address", address)
			return true
		}
		return false
	})
	return nil, nil
}

// metricsRetryInterval is how often ServeMetrics tries an address in use again.
var metricsRetryInterval = time.Second

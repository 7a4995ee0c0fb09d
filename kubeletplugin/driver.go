package kubeletplugin

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/discover"
	"github.com/gpudra/gpudra/kubeletplugin/health"
	"github.com/gpudra/gpudra/kubeletplugin/mps"
	"github.com/gpudra/gpudra/kubeletplugin/usage"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// Config is what the plugin needs to run on one node.
type Config struct {
	NodeName string
	// Client is what prepares use (the claims, ResourceSlices, the pods of a share's
	// priority, MPS control daemon pods).
	Client kubernetes.Interface
	// BackgroundClient is what the background writers and readers use (claims' device
	// status, Events, the Node's MIG layout labels, the owners of GPU processes, the
	// readiness probe's ResourceSlices): a client with a rate limiter of its own keeps
	// them from using up the requests prepares wait for. nil: Client.
	BackgroundClient kubernetes.Interface
	Backend          *discover.Backend
	Render           driver.RenderOptions
	PluginDataDir    string
	RegistrarDir     string
	CDIRoot          string
	CheckpointDir    string
	// DriverRoot is where the NVIDIA driver's device files, libraries and binaries are
	// found ("" or "/" on a GPU node; the lab's fake root with a simulated backend). The
	// CDI specs' GPU parts come from nvcdi reading it (cdi.Driver).
	DriverRoot string
	// ContainerDriverRoot is where the plugin sees DriverRoot when it runs in a container
	// that mounts it elsewhere (the chart's pod: /driver-root); "" when it runs on the host.
	// nvcdi and the default MPS and nvidia-smi paths read it; the CDI specs name DriverRoot.
	ContainerDriverRoot string
	// VGPULibrary is the host path of HAMi-core's libvgpu.so; "" when not installed.
	VGPULibrary string
	// CDIHookPath is the host path of nvidia-cdi-hook, which runs the hooks nvcdi puts
	// in the CDI specs (update-ldcache, create-symlinks, ...); "" writes no hooks.
	CDIHookPath string
	// MPS starts and stops the per-claim MPS control daemons. nil: mps.Process running
	// <ContainerDriverRoot or DriverRoot>/usr/bin/nvidia-cuda-mps-control. mps.Simulated needs a simulated backend.
	MPS MPSControl
	// TimeSlicer sets the GPUs' time-slices. nil: NvidiaSMI running
	// <ContainerDriverRoot or DriverRoot>/usr/bin/nvidia-smi. SimulatedTimeSlicer needs a simulated backend.
	TimeSlicer TimeSlicer
	// BootIDPath overrides /proc/sys/kernel/random/boot_id (tests).
	BootIDPath string
	// Hook, when set, is called at each named point of prepare and unprepare (tests).
	Hook Hook
	// RollingUpdatePodUID is the UID of the plugin's pod. When set, the plugin registers
	// under a socket named after it (kubeletplugin.RollingUpdate), so that during a DaemonSet
	// rolling update a new plugin can start beside the old one and the kubelet switches over
	// without a gap; the node-wide lock keeps their prepares from interleaving.
	RollingUpdatePodUID string
	// HealthInjectionFile, with a simulated backend only, is a file whose lines
	// ("gpu=3 xid=79") inject GPU events; "" for none.
	HealthInjectionFile string
	// RepairBackoff is how long the background repair of a claim (a part start-up could
	// not restore, an MPS control daemon that exited) waits after a failure before it
	// tries again; it doubles with each failure up to 5 min. 0 means 1 s.
	RepairBackoff time.Duration
	// MPSCheckInterval is how often the plugin checks that the MPS control daemons of
	// prepared claims run, where they are not in pods; one that has exited is restarted.
	// 0 means 10 s.
	MPSCheckInterval time.Duration
	// MIGLayoutInterval is how often, with static MIG, the plugin re-reads the MIG
	// instances of GPUs in MIG mode and republishes when someone created or destroyed one.
	// 0 means 30 s.
	MIGLayoutInterval time.Duration
	// NVMLEventWait is how long one wait for NVML health events blocks. NVML cannot cut a
	// wait short, so stopping the plugin waits for the one under way to end. 0 means 1 s.
	NVMLEventWait time.Duration
	// MIGLayoutsFile is the file of named MIG layouts (driver/miglayout) of which the
	// Node's gpu.gpudra.dev/mig-config label chooses one, with static MIG; it is read
	// again every MIGLayoutInterval. "" applies none.
	MIGLayoutsFile string
	// Clock tells the time for back-offs (a MIG layout that failed); nil is the real clock.
	Clock clock.PassiveClock
	// Usage is how the plugin finds what the prepared claims use (package usage).
	Usage usage.Config
	// StatusInterval is how often the prepared claims' status.devices entries are
	// written (their Ready condition, and their usage where it is sampled), where they
	// changed; 0 is 30 s.
	StatusInterval time.Duration
	// SharePriorityThreshold, when set, gives a Fixed or Guaranteed share whose configuration
	// leaves limits.priority unset the priority of its claim's pods: High when the highest
	// spec.priority among the pods the claim is reserved for (resolved from their
	// PriorityClass; none: 0) is at least this value, else Low. The plugin then reads those
	// pods (get) at prepare. nil: such shares have the mechanism's normal priority.
	SharePriorityThreshold *int32
}

// Driver is the running plugin for one node.
type Driver struct {
	cfg       Config
	inventory *driver.Inventory
	pool      *driver.Pool
	state     *state
	helper    *kubeletplugin.Helper
	cancel    context.CancelCauseFunc
	health    *healthWatch
	metrics   *metrics
	usage     *usage.Sampler    // nil when usage is not sampled
	probes    probeState        // readiness and liveness (probes.go)
	types     map[string]string // published device name → type
	// startMounts are the shm tmpfs New mounted, which Start unmounts when it fails.
	startMounts []string

	mu sync.Mutex // guards pool and orders its publishing
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// New discovers the node's GPUs and recovers the prepared claims from the checkpoint,
// CDI specs and MIG instances left by an earlier run, without talking to the kubelet.
func New(ctx context.Context, cfg Config) (*Driver, error) {
	if cfg.BackgroundClient == nil {
		cfg.BackgroundClient = cfg.Client
	}
	inv, err := discover.Discover(cfg.Backend)
	if err != nil {
		return nil, fmt.Errorf("discovering GPUs: %w", err)
	}
	pool, err := driver.Render(inv, cfg.Render)
	if err != nil {
		return nil, err
	}
	if !cfg.Backend.Simulated {
		if _, ok := cfg.MPS.(mps.Simulated); ok {
			return nil, fmt.Errorf("simulated MPS control daemons need a simulated NVML backend, not %s", cfg.Backend.Name)
		}
		if _, ok := cfg.TimeSlicer.(*SimulatedTimeSlicer); ok {
			return nil, fmt.Errorf("simulated time-slicing needs a simulated NVML backend, not %s", cfg.Backend.Name)
		}
	}
	if cfg.HealthInjectionFile != "" && !cfg.Backend.Simulated {
		return nil, fmt.Errorf("health event injection (%s) needs a simulated NVML backend, not %s", cfg.HealthInjectionFile, cfg.Backend.Name)
	}
	st, err := newStateFor(cfg, inv, pool, klog.FromContext(ctx))
	if err != nil {
		return nil, err
	}
	// What recovering mounts (spare MPS trees, restored claims' shm tmpfs) is undone when
	// the start fails.
	st.mps.recordStartMounts()
	sampler := newUsageSampler(ctx, cfg, st)
	m := newMetrics(st, sampler)
	st.repairs.metrics = m
	err = st.recover()
	m.checkpointsRecover.Add(float64(st.corruptions))
	if err != nil {
		st.undoStart(st.mps.stopRecording())
		return nil, fmt.Errorf("recovering prepared claims: %w", err)
	}
	gpus, err := health.Open(cfg.CheckpointDir, st.bootID, inv, klog.FromContext(ctx))
	if err != nil {
		st.undoStart(st.mps.stopRecording())
		return nil, err
	}
	d := &Driver{cfg: cfg, inventory: inv, pool: pool, state: st, cancel: func(error) {},
		health: &healthWatch{gpuHealth: gpus}, metrics: m, usage: sampler, types: deviceTypes(pool)}
	d.reportUnreadable(ctx)
	if err := d.republish(ctx); err != nil { // with the GPU health file's taints
		st.undoStart(st.mps.stopRecording())
		return nil, err
	}
	d.startMounts = st.mps.stopRecording()
	st.repairs.start(ctx)
	return d, nil
}

// Start discovers the node's GPUs, recovers prepared claims, registers with the kubelet
// and publishes the node's ResourceSlices. Fatal background errors cancel ctx's child.
func Start(ctx context.Context, cfg Config) (*Driver, error) {
	d, err := New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	inv := d.inventory
	ctx, cancel := context.WithCancelCause(ctx)
	d.cancel = cancel
	// A start that fails leaves nothing mounted (nor running) behind.
	failed := func(err error) (*Driver, error) {
		cancel(err)
		d.state.undoStart(d.startMounts)
		return nil, err
	}

	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(api.DriverName),
		kubeletplugin.NodeName(cfg.NodeName),
		kubeletplugin.KubeClient(cfg.Client),
		kubeletplugin.PluginDataDirectoryPath(cfg.PluginDataDir),
		kubeletplugin.RegistrarDirectoryPath(cfg.RegistrarDir),
		// The node's lock and each claim's (state) order prepares and unprepares, across
		// plugin instances too; claims go on side by side.
		kubeletplugin.Serialize(false),
		kubeletplugin.GRPCInterceptor(d.probes.observeRegistration),
	}
	if cfg.RollingUpdatePodUID != "" {
		opts = append(opts, kubeletplugin.RollingUpdate(types.UID(cfg.RollingUpdatePodUID)))
	}
	if node, err := cfg.Client.CoreV1().Nodes().Get(ctx, cfg.NodeName, metav1.GetOptions{}); err == nil {
		opts = append(opts, kubeletplugin.NodeUID(node.UID))
		d.health.nodeUID = node.UID
	} else if !apierrors.IsNotFound(err) {
		return failed(fmt.Errorf("reading Node %s: %w", cfg.NodeName, err))
	}
	helper, err := kubeletplugin.Start(ctx, d, opts...)
	if err != nil {
		return failed(fmt.Errorf("starting the kubelet plugin: %w", err))
	}
	d.mu.Lock()
	d.helper = helper
	d.mu.Unlock()
	if err := d.republish(ctx); err != nil {
		helper.Stop()
		return failed(fmt.Errorf("publishing ResourceSlices: %w", err))
	}
	d.startMounts = nil
	klog.FromContext(ctx).Info("Publishing ResourceSlices", "node", cfg.NodeName, "backend", inv.Backend, "gpus", len(inv.GPUs), "slices", len(d.Pool().Slices))
	d.startHealth(ctx)
	d.startMIGLayoutWatch(ctx)
	d.startMIGLayouts(ctx)
	d.startClaimStatus(ctx)
	return d, nil
}

// Inventory is what the plugin discovered.
func (d *Driver) Inventory() *driver.Inventory { return d.inventory }

// Stop unregisters, stops publishing (published slices stay until the node goes), stops
// watching GPU health and removes its spare MPS trees (their shm tmpfs).
func (d *Driver) Stop() {
	if d.helper != nil {
		d.helper.Stop()
	}
	d.cancel(nil)
	d.health.watchers.Wait()
	d.state.repairs.shutdown()
	d.state.removeSpareMPSDirs()
}

// PrepareResourceClaims prepares allocated claims: MIG instances, CDI specs, enforced
// sharing. Each claim succeeds or fails on its own; a failed claim leaves nothing behind,
// except one whose MPS control daemon's pod is not ready yet (mps.Pods), which stays
// prepared for the kubelet's next try.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	logger := klog.FromContext(ctx)
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		start, kind := time.Now(), claimType(c, d.deviceTypesNow())
		// The wait for the claim's MPS control daemon is outside the node's lock: other
		// claims' prepares go on meanwhile. A daemon that is not ready fails this call,
		// the claim stays prepared, and the kubelet's retry waits again.
		devs, err := d.state.prepareClaim(ctx, c, claims)
		d.metrics.prepareSeconds.WithLabelValues(kind).Observe(time.Since(start).Seconds())
		if err != nil {
			d.metrics.prepareErrors.WithLabelValues(kind).Inc()
			logger.Error(err, "Preparing claim failed", "claim", klog.KObj(c))
			out[c.UID] = kubeletplugin.PrepareResult{Err: fmt.Errorf("gpudra: preparing claim %s/%s: %w", c.Namespace, c.Name, err)}
			continue
		}
		var names []string
		for _, dv := range devs {
			names = append(names, dv.DeviceName)
		}
		logger.Info("Prepared claim", "claim", klog.KObj(c), "uid", c.UID, "devices", names, "duration", time.Since(start).Round(time.Microsecond))
		out[c.UID] = kubeletplugin.PrepareResult{Devices: devs}
	}
	return out, nil
}

// UnprepareResourceClaims undoes PrepareResourceClaims; unknown claims are already done.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		start := time.Now()
		err := d.state.unprepareClaim(ctx, c.UID)
		d.metrics.unprepareSeconds.Observe(time.Since(start).Seconds())
		if err != nil {
			d.metrics.unprepareErrors.Inc()
			klog.FromContext(ctx).Error(err, "Unpreparing claim failed", "claim", c.NamespacedName)
			out[c.UID] = fmt.Errorf("gpudra: unpreparing claim %s: %w", c.NamespacedName, err)
			continue
		}
		klog.FromContext(ctx).Info("Unprepared claim", "claim", c.NamespacedName, "uid", c.UID)
		out[c.UID] = nil
	}
	return out, nil
}

// HandleError logs background errors. Publishing errors (invalid or dropped fields)
// will not fix themselves: they stop the plugin so that it fails loudly, except
// dropped device taints (a cluster without DRADeviceTaints), which only cost the
// scheduler its view of unhealthy GPUs.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	runtime.HandleErrorWithContext(ctx, err, msg)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) && !taintsDropped(err) {
		d.cancel(fmt.Errorf("%s: %w", msg, err))
	}
}

// Command gpudra-kubelet-plugin is gpudra's DRA kubelet plugin: it runs on each GPU
// node, publishes the node's GPUs as ResourceSlices and prepares allocated claims.
package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/cmd/internal/nvmlbackend"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/internal/buildinfo"
	"github.com/gpudra/gpudra/internal/logoptions"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
	"github.com/gpudra/gpudra/kubeletplugin/mps"
	"github.com/gpudra/gpudra/kubeletplugin/usage"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

func main() {
	err := newCommand().Execute()
	klog.Flush()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpudra-kubelet-plugin:", err)
		os.Exit(1)
	}
}

type flags struct {
	nodeName, nvml, mig, kubeconfig   string
	kfd                               string
	pluginDataDir, registrarDir       string
	cdiRoot, checkpointDir, metricsAt string
	driverRoot, containerDriverRoot   string
	vgpuLibrary                       string
	healthInjectionFile, podUID       string
	mpsControl, nvidiaSMI, cdiHook    string
	mpsDaemons, mpsImage              string
	mpsNamespace, mpsPriorityClass    string
	mpsPullPolicy, mpsServiceAccount  string
	mpsPullSecrets                    []string
	migLayouts, publish               string
	podResourcesSocket                string
	// sharePriorityThreshold is --share-priority-threshold; nil when not given.
	sharePriorityThreshold *int32
	memoryOversubscription float64
	metricsSecure          bool
	logging                *logsapi.LoggingConfiguration
	// gates are --feature-gates (features.New when nil).
	gates featuregate.MutableVersionedFeatureGate
}

// givenOrNil is v when the flag was given, else nil.
func givenOrNil[T any](fs *pflag.FlagSet, name string, v *T) *T {
	if !fs.Changed(name) {
		return nil
	}
	return v
}

// sharePriorityFlag derives a share's unset priority from its pods' PriorityClass.
const sharePriorityFlag = "share-priority-threshold"

func newCommand() *cobra.Command { return newCommandFor(&flags{logging: logoptions.New()}) }

// newCommandFor is the plugin's command, its flags bound to f.
func newCommandFor(f *flags) *cobra.Command {
	cmd := &cobra.Command{
		Use:           "gpudra-kubelet-plugin",
		Short:         "gpudra's DRA kubelet plugin for NVIDIA GPUs",
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if buildinfo.PrintVersion(cmd.OutOrStdout(), cmd.Flags(), cmd.Name()) {
				return nil
			}
			if err := f.validate(); err != nil {
				return err
			}
			f.sharePriorityThreshold = givenOrNil(cmd.Flags(), sharePriorityFlag, f.sharePriorityThreshold)
			if err := f.checkFeatureGates(); err != nil {
				return err
			}
			if err := logoptions.ValidateAndApply(f.logging); err != nil {
				return err
			}
			return run(cmd.Context(), *f)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.nodeName, "node-name", os.Getenv("NODE_NAME"), "name of the node this plugin runs on (required; env NODE_NAME)")
	fs.StringVar(&f.nvml, "nvml", "nvml", `NVML backend: "nvml" (the real library), a simulated node "sim:<profile>" / "sim:<profile.yaml>" for labs and tests, or "none" (no NVIDIA GPUs; needs --kfd)`)
	fs.StringVar(&f.kfd, "kfd", "", `AMD and Hygon GPUs: "" (none), "sysfs" (the KFD topology in /sys; an error where there is none), or a simulated node "sim:<profile>" / "sim:<profile.yaml>" (with --nvml=none, also the NVIDIA GPUs its profile names)`)
	fs.StringVar(&f.mig, "mig", string(driver.MIGStatic), "MIG strategy: static (follow each GPU's MIG mode), dynamic (publish whole GPUs and every MIG placement) or none")
	fs.StringVar(&f.publish, "publish", string(driver.PublishAll), "which devices this node publishes: all (whole GPUs, shares, NVLink groups and the MIG devices --mig asks for), training (whole GPUs and NVLink groups) or whole (whole GPUs only, without counters); fewer devices make every scheduling decision on the node cheaper (docs/devices.md, Node pools)")
	fs.StringVar(&f.migLayouts, "mig-layouts", "", `file of named MIG layouts in mig-parted's format (version: v1, mig-configs: ...); with --mig=static the plugin partitions the node's free GPUs as the layout its Node's label `+api.LabelMIGConfig+` names, and reports progress in the label `+api.LabelMIGConfigState+` (the chart mounts its ConfigMap at /etc/gpudra/mig-layouts.yaml; empty: no layouts)`)
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster config)")
	fs.StringVar(&f.pluginDataDir, "plugin-data-dir", filepath.Join(kubeletplugin.KubeletPluginsDir, api.DriverName), "directory for the plugin's DRA socket")
	fs.StringVar(&f.registrarDir, "registrar-dir", kubeletplugin.KubeletRegistryDir, "kubelet plugin registry directory")
	fs.StringVar(&f.cdiRoot, "cdi-root", "/var/run/cdi", "directory for CDI specs")
	fs.StringVar(&f.checkpointDir, "checkpoint-dir", "", "directory for the prepare checkpoint (default: --plugin-data-dir)")
	fs.StringVar(&f.driverRoot, "driver-root", "/", "host directory holding the NVIDIA driver (/dev/nvidia*, libnvidia-ml.so.<version> and the other libraries and binaries), which nvcdi reads (at --container-driver-root when set) for the GPU parts of the CDI specs; a fake root prepared by the lab with --nvml=sim:<profile>")
	fs.StringVar(&f.containerDriverRoot, "container-driver-root", "", "where this plugin's container mounts --driver-root (the chart: /driver-root), read for the driver's files and tools; the CDI specs name them under --driver-root, the host path (default: --driver-root itself, for a plugin running on the host)")
	fs.Float64Var(&f.memoryOversubscription, "memory-oversubscription", 1, "factor from 1 to 4 by which each GPU's share device (gpu-share.gpudra.dev) multiplies its memory capacity, so shares may together ask for more memory than the card has; such shares run under HAMi-core (--vgpu-library) with its virtual device memory (CUDA_OVERSUBSCRIBE=true), shares under MPS are refused at prepare. Whole GPUs, MIG devices and NVLink groups are not oversubscribed (1: off)")
	fs.StringVar(&f.vgpuLibrary, "vgpu-library", "", "host path of HAMi-core's libvgpu.so; when set, GPU shares are enforced by preloading it (else by MPS limits)")
	fs.StringVar(&f.mpsControl, "mps-control-daemon", "", "path of nvidia-cuda-mps-control, started once per prepared MPS claim (default: <container-driver-root or driver-root>/usr/bin/nvidia-cuda-mps-control; with --nvml=sim:... daemons are simulated unless this is set)")
	fs.StringVar(&f.mpsDaemons, "mps-control-daemons", mpsInProcess, `where each MPS claim's control daemon runs: "process" (a child of this plugin: it stops when the plugin's container does) or "pod" (a Deployment of one pod per claim on this node, in --mps-daemon-namespace, running --mps-daemon-image: it outlives plugin restarts and rolling updates; needs RBAC on deployments and pods there)`)
	fs.StringVar(&f.mpsImage, "mps-daemon-image", "", "image of the MPS control daemon pods (--mps-control-daemons=pod): gpudra's, the plugin's own")
	fs.StringVar(&f.mpsNamespace, "mps-daemon-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the MPS control daemon pods (env POD_NAMESPACE: the plugin's own)")
	fs.StringVar(&f.mpsPriorityClass, "mps-daemon-priority-class", "", "priority class of the MPS control daemon pods (empty: none)")
	fs.StringVar(&f.mpsPullPolicy, "mps-daemon-image-pull-policy", string(corev1.PullIfNotPresent), "pull policy of --mps-daemon-image: Always, IfNotPresent or Never")
	fs.StringSliceVar(&f.mpsPullSecrets, "mps-daemon-image-pull-secrets", nil, "Secrets (in --mps-daemon-namespace) to pull --mps-daemon-image with, comma-separated")
	fs.StringVar(&f.mpsServiceAccount, "mps-daemon-service-account", "gpudra-mps-daemon", "ServiceAccount (in --mps-daemon-namespace) of the MPS control daemon pods: one with no API permissions, its token not mounted (empty: the namespace's default)")
	fs.StringVar(&f.nvidiaSMI, "nvidia-smi", "", "path of nvidia-smi, which sets the GPU time-slice of TimeSlicing configs (compute-policy --set-timeslice; default: <container-driver-root or driver-root>/usr/bin/nvidia-smi; with --nvml=sim:... time-slices are simulated unless this is set)")
	fs.StringVar(&f.cdiHook, "nvidia-cdi-hook", "", `host path of nvidia-container-toolkit's nvidia-cdi-hook, which the container runtime runs for the hooks in the CDI specs (update-ldcache, create-symlinks, ...); "none" writes no hooks (default: `+cdi.DefaultHookPath+`; with --nvml=sim:... no hooks unless this is set)`)
	fs.StringVar(&f.healthInjectionFile, "health-injection-file", "", `simulated backends only: a file whose lines ("gpu=3 xid=79", "gpu=1 double-bit-ecc", "gpu=0 gpu-lost") inject GPU health events; the plugin consumes it (default: <plugin-data-dir>/inject-health with --nvml=sim:...)`)
	fs.StringVar(&f.podResourcesSocket, "pod-resources-socket", usage.DefaultPodResourcesSocket, "the kubelet's PodResources socket, which says which claims the pods' containers were given (for the per-claim usage metrics and status; the plugin reads processes' pods from the host's /proc)")
	fs.StringVar(&f.podUID, "rolling-update-pod-uid", os.Getenv("POD_UID"), "UID of this plugin's pod (env POD_UID, from the downward API): when set, a new plugin pod can start beside the old one during a rolling update and the kubelet (1.33+) switches over without a gap; empty: one plugin per node at a time")
	f.sharePriorityThreshold = new(int32)
	fs.Int32Var(f.sharePriorityThreshold, sharePriorityFlag, 0, "gives GPU shares whose config leaves limits.priority unset (Fixed and Guaranteed) the priority of their pods: High when the highest spec.priority of the pods a claim is reserved for (from their PriorityClass; none: 0) is at least this value, else Low; the plugin then reads those pods at prepare (RBAC: get pods). Not given: such shares have the enforcing mechanism's normal priority")
	fs.StringVar(&f.metricsAt, "metrics-bind-address", "", "address for Prometheus metrics (/metrics) and the readiness and liveness probes (/readyz: registered with the kubelet and ResourceSlices published; /livez: background loops running), e.g. :9400 (empty: off)")
	fs.BoolVar(&f.metricsSecure, "metrics-secure", true, "serve --metrics-bind-address over HTTPS (a self-signed certificate made at start), /metrics only to callers whose bearer token the API server authenticates (TokenReview) and allows get on the non-resource URL /metrics (SubjectAccessReview; RBAC: create tokenreviews and subjectaccessreviews), the probes to anyone; false: plain HTTP to anyone, accepted on a loopback address only")
	f.addFeatureGates(fs)
	logoptions.AddFlags(f.logging, fs)
	buildinfo.AddVersionFlag(fs)
	cmd.AddCommand(mpsExecCommand(), mpsDaemonCommand())
	return cmd
}

// renderOptions are what the node publishes, from --mig, --memory-oversubscription and
// --publish.
func renderOptions(f flags) (driver.RenderOptions, error) {
	if o := f.memoryOversubscription; !(o >= 1 && o <= driver.MaxMemoryOversubscription) {
		return driver.RenderOptions{}, fmt.Errorf("--memory-oversubscription=%v: accepted range is 1 to %v (1: off)", o, driver.MaxMemoryOversubscription)
	}
	render := driver.RenderOptions{MIG: driver.MIGStrategy(f.mig), MemoryOversubscription: f.memoryOversubscription}
	if err := render.Validate(); err != nil {
		return driver.RenderOptions{}, fmt.Errorf("--mig: %w", err)
	}
	publish := driver.Publication(f.publish)
	render, err := publish.Options(render)
	if err != nil {
		return driver.RenderOptions{}, fmt.Errorf("--publish: %w", err)
	}
	if publish != "" && publish != driver.PublishAll {
		switch {
		case f.migLayouts != "":
			return driver.RenderOptions{}, fmt.Errorf("--publish=%s publishes no MIG devices: --mig-layouts must be empty", publish)
		case f.memoryOversubscription > 1:
			return driver.RenderOptions{}, fmt.Errorf("--publish=%s publishes no shares: --memory-oversubscription must be 1", publish)
		}
	}
	return render, nil
}

// mpsExecCommand is how the plugin runs nvidia-cuda-mps-control for a claim under MPS:
// the plugin re-executes itself with it in a new mount namespace, where the claim's shm
// directory becomes /dev/shm (mps.Exec). Not for people.
func mpsExecCommand() *cobra.Command {
	return &cobra.Command{
		Use:                mps.ExecCommand + " <shm dir> <program> [args...]",
		Short:              "run a program with a claim's MPS shm directory as /dev/shm (internal: in a mount namespace of its own)",
		Hidden:             true,
		DisableFlagParsing: true,
		Args:               cobra.MinimumNArgs(2),
		RunE:               func(_ *cobra.Command, args []string) error { return mps.Exec(args) },
	}
}

func run(ctx context.Context, f flags) error {
	if f.nodeName == "" {
		return fmt.Errorf("--node-name is required (or set NODE_NAME)")
	}
	// The name goes into the ResourceSlices' pool and node names and the MPS daemons' names.
	if errs := validation.IsDNS1123Subdomain(f.nodeName); len(errs) > 0 {
		return fmt.Errorf("--node-name %q: a node name is a DNS subdomain (RFC 1123: lower-case letters, digits, '-' and '.', at most 253 characters): %s", f.nodeName, strings.Join(errs, "; "))
	}
	if f.checkpointDir == "" {
		f.checkpointDir = f.pluginDataDir
	}
	render, err := renderOptions(f)
	if err != nil {
		return err
	}
	var cfg *rest.Config
	if f.kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return fmt.Errorf("kubernetes client config: %w", err)
	}
	clients, err := newAPIClients(cfg)
	if err != nil {
		return err
	}
	client := clients.prepare
	var metrics plugin.MetricsAccess
	if f.metricsAt != "" {
		if metrics, err = metricsAccess(f, clients.background); err != nil {
			return err
		}
	}
	for _, dir := range []string{f.pluginDataDir, f.registrarDir, f.cdiRoot, f.checkpointDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return err
		}
	}
	backend, err := nvmlbackend.OpenNode(f.nvml, f.kfd, f.nodeName)
	if err != nil {
		return err
	}
	defer backend.Close()
	if backend.Simulated {
		klog.InfoS("Using a SIMULATED backend: no real GPU is used", "backend", backend.Name)
		if f.healthInjectionFile == "" && backend.NVML != nil {
			f.healthInjectionFile = filepath.Join(f.pluginDataDir, "inject-health")
		}
	} else if f.healthInjectionFile != "" {
		return fmt.Errorf("--health-injection-file needs a simulated backend (--nvml=sim:<profile>), not --nvml=%s", f.nvml)
	}

	daemons, timeSlicer := sharingTools(f, backend.Simulated)
	timeSlicer = f.gatedTimeSlicer(timeSlicer)
	switch f.mpsDaemons {
	case mpsInProcess:
		if f.mpsNamespace != "" {
			if err := stopPodDaemons(client, f.mpsNamespace, f.nodeName); err != nil {
				return fmt.Errorf("stopping the MPS control daemon pods of an earlier plugin: %w", err)
			}
		}
	case mpsInPod:
		pods, err := mpsPods(f, daemons, backend.Simulated)
		if err != nil {
			return err
		}
		pods.Client = client
		if err := pods.Validate(); err != nil {
			return fmt.Errorf("--mps-control-daemons=pod: %w (set --mps-daemon-image, --mps-daemon-namespace)", err)
		}
		klog.InfoS("MPS control daemons run in pods of their own", "namespace", pods.Namespace, "image", pods.Image, "simulated", pods.Simulated)
		daemons = pods
	default:
		return fmt.Errorf("--mps-control-daemons is %q, want %q or %q", f.mpsDaemons, mpsInProcess, mpsInPod)
	}
	hook := cdiHookPath(f.cdiHook, backend.Simulated)
	pause, err := pauseHook(f.pluginDataDir, backend.Simulated)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	d, err := plugin.Start(ctx, plugin.Config{
		NodeName:               f.nodeName,
		RollingUpdatePodUID:    f.podUID,
		Client:                 client,
		BackgroundClient:       clients.background,
		Backend:                backend,
		Render:                 render,
		PluginDataDir:          f.pluginDataDir,
		RegistrarDir:           f.registrarDir,
		CDIRoot:                f.cdiRoot,
		CheckpointDir:          f.checkpointDir,
		DriverRoot:             f.driverRoot,
		ContainerDriverRoot:    f.containerDriverRoot,
		VGPULibrary:            f.vgpuLibrary,
		CDIHookPath:            hook,
		MPS:                    daemons,
		TimeSlicer:             timeSlicer,
		HealthInjectionFile:    f.healthInjectionFile,
		MIGLayoutsFile:         f.migLayouts,
		Usage:                  f.usageConfig(),
		SharePriorityThreshold: f.sharePriorityThreshold,
		Hook:                   pause,
	})
	if err != nil {
		return err
	}
	if f.metricsAt != "" {
		addr, err := d.ServeMetrics(ctx, f.metricsAt, metrics)
		if err != nil {
			d.Stop()
			return err
		}
		if addr != nil {
			klog.InfoS("Serving metrics and probes", "address", addr.String(), "https", f.metricsSecure, "paths", []string{"/metrics", "/readyz", "/livez"})
		}
	}
	<-ctx.Done()
	d.Stop()
	if cause := context.Cause(ctx); cause != nil && cause != context.Canceled {
		return cause
	}
	return nil
}

// pauseAtEnv names a step of prepare or unprepare (kubeletplugin.PreparePoints,
// UnpreparePoints) at which the plugin stops until it is killed, once: the crash tests that
// kill the plugin through the real kubelet set it. It is honoured with a simulated backend
// only, and the plugin writes <plugin data dir>/paused-at-<point> when it stops there.
const pauseAtEnv = "GPUDRA_TEST_PAUSE_AT"

func pauseHook(pluginDataDir string, simulated bool) (plugin.Hook, error) {
	point := os.Getenv(pauseAtEnv)
	if point == "" {
		return nil, nil
	}
	if !simulated {
		return nil, fmt.Errorf("%s=%s: pausing is for crash tests with a simulated backend (--nvml=sim:...)", pauseAtEnv, point)
	}
	hook, err := plugin.PauseAt(point, filepath.Join(pluginDataDir, "paused-at-"+point))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pauseAtEnv, err)
	}
	if hook != nil {
		klog.InfoS("The plugin stops at a step of prepare or unprepare until it is killed", "point", point, "env", pauseAtEnv)
	}
	return hook, nil
}

// cdiHookPath is the nvidia-cdi-hook the CDI specs' hooks name: the flag's value, else
// nvidia-container-toolkit's default path; none ("") with a simulated backend, whose
// node has no toolkit installed (a hook binary missing at container creation fails it).
func cdiHookPath(flag string, simulated bool) string {
	switch {
	case flag == "none":
		return ""
	case flag != "":
		return flag
	case simulated:
		klog.InfoS("Writing no nvidia-cdi-hook hooks in CDI specs with a simulated backend (set --nvidia-cdi-hook to add them)")
		return ""
	}
	return cdi.DefaultHookPath
}

// sharingTools are what starts MPS control daemons and sets time-slices: the driver's
// own tools (where this process sees the driver root), or, with a simulated backend and no path given, simulations of them.
func sharingTools(f flags, simulated bool) (mps.Control, plugin.TimeSlicer) {
	tools := cmp.Or(f.containerDriverRoot, f.driverRoot)
	var ctl mps.Control = mps.Process{Binary: f.mpsControl}
	if f.mpsControl == "" {
		ctl = mps.Process{Binary: filepath.Join(tools, "usr/bin/nvidia-cuda-mps-control")}
		if simulated {
			klog.InfoS("Using SIMULATED MPS control daemons: a file in each claim's MPS pipe directory", "file", mps.SimulatedFile)
			ctl = mps.Simulated{}
		}
	}
	var ts plugin.TimeSlicer = plugin.NvidiaSMI{Binary: f.nvidiaSMI}
	if f.nvidiaSMI == "" {
		ts = plugin.NvidiaSMI{Binary: filepath.Join(tools, "usr/bin/nvidia-smi")}
		if simulated {
			klog.InfoS("Using SIMULATED GPU time-slices (logged, not applied)")
			ts = &plugin.SimulatedTimeSlicer{}
		}
	}
	return ctl, ts
}

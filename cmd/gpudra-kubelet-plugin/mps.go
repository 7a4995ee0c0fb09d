package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/kubeletplugin/mps"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// Where the plugin runs the per-claim MPS control daemons (--mps-control-daemons).
const (
	mpsInProcess = "process"
	mpsInPod     = "pod"
)

// mpsDaemonCommand is what a claim's MPS control daemon pod runs (mps.Pods): it
// starts the daemon, keeps it, and stops it when the pod is deleted; with --check, the
// pod's readiness probe, it only says whether the daemon answers.
func mpsDaemonCommand() *cobra.Command {
	var (
		d                  prepared.MPSDaemon
		devices, pinned    string
		binary             string
		simulated, checkIt bool
	)
	cmd := &cobra.Command{
		Use:   mps.DaemonCommand,
		Short: "run one claim's MPS control daemon in the foreground (what the plugin's per-claim daemon pods run)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var ctl mps.Control = mps.Simulated{}
			switch {
			case simulated && binary != "":
				return fmt.Errorf("--simulated and --mps-control-daemon exclude each other")
			case !simulated && binary == "":
				return fmt.Errorf("--mps-control-daemon (the path of nvidia-cuda-mps-control) or --simulated is required")
			case !simulated:
				ctl = mps.Process{Binary: binary}
			}
			if checkIt {
				running, err := ctl.Running(d.PipeDir)
				if err != nil {
					return err
				}
				if !running {
					return fmt.Errorf("no MPS control daemon answers in %s", d.PipeDir)
				}
				return nil
			}
			if devices == "" {
				return fmt.Errorf("--devices: the UUIDs of the GPUs or MIG devices the daemon serves are required")
			}
			d.Devices = strings.Split(devices, ",")
			if pinned != "" {
				for k, s := range strings.Split(pinned, ",") {
					mib, err := strconv.ParseInt(s, 10, 64)
					if err != nil || mib < 0 {
						return fmt.Errorf("--pinned-memory-mib: entry %d is %q, want a MiB count ≥ 0 per device", k, s)
					}
					d.PinnedMemoryMiB = append(d.PinnedMemoryMiB, mib)
				}
				if len(d.PinnedMemoryMiB) != len(d.Devices) {
					return fmt.Errorf("--pinned-memory-mib has %d entries, want one per device of --devices (%d)", len(d.PinnedMemoryMiB), len(d.Devices))
				}
			}
			if d.ActiveThreadPercent < 0 || d.ActiveThreadPercent > 100 {
				return fmt.Errorf("--active-thread-percentage is %d, want 0 (no cap) to 100", d.ActiveThreadPercent)
			}
			// In its pod the daemon's /dev/shm is the claim's shm directory already (a
			// volume): it runs in the pod's mount namespace.
			d.ShmDir = ""
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return mps.RunDaemon(klog.NewContext(ctx, klog.Background()), ctl, d, time.Second)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&d.PipeDir, "pipe-dir", cdi.MPSPipeDir, "the daemon's CUDA_MPS_PIPE_DIRECTORY")
	fs.StringVar(&d.LogDir, "log-dir", cdi.MPSLogDir, "the daemon's CUDA_MPS_LOG_DIRECTORY")
	fs.StringVar(&devices, "devices", "", "comma-separated UUIDs of the GPUs or MIG devices it serves (CUDA_VISIBLE_DEVICES)")
	fs.IntVar(&d.ActiveThreadPercent, "active-thread-percentage", 0, "default active thread percentage of its clients (0: no cap)")
	fs.StringVar(&pinned, "pinned-memory-mib", "", "comma-separated default pinned device memory limits in MiB, one per device (0: no cap)")
	fs.StringVar(&binary, "mps-control-daemon", "", "path of nvidia-cuda-mps-control")
	fs.BoolVar(&simulated, "simulated", false, "run a simulated daemon (a file in the pipe directory), for simulated NVML backends")
	fs.BoolVar(&checkIt, "check", false, "only check that a daemon answers in --pipe-dir (a readiness probe)")
	return cmd
}

// mpsPods is the MPSControl that runs each claim's daemon in a pod, from the flags.
func mpsPods(f flags, tools mps.Control, simulated bool) (mps.Pods, error) {
	p := mps.Pods{
		Namespace: f.mpsNamespace, NodeName: f.nodeName, Image: f.mpsImage, Simulated: simulated,
		PullPolicy: corev1.PullPolicy(f.mpsPullPolicy), PullSecrets: f.mpsPullSecrets,
		DriverRoot: f.driverRoot, LibraryPath: os.Getenv("LD_LIBRARY_PATH"), PriorityClassName: f.mpsPriorityClass,
		ServiceAccountName: f.mpsServiceAccount,
	}
	switch p.PullPolicy {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return p, fmt.Errorf("--mps-daemon-image-pull-policy is %q, want %s, %s or %s", f.mpsPullPolicy, corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever)
	}
	if !simulated {
		proc, ok := tools.(mps.Process)
		if !ok || f.containerDriverRoot == "" || !strings.HasPrefix(proc.Binary, f.containerDriverRoot+"/") {
			return p, fmt.Errorf("--mps-control-daemons=pod: the daemon pods mount --driver-root at %s; run the plugin with --container-driver-root and --mps-control-daemon under it", mps.PodDriverRoot)
		}
		p.Binary = mps.PodDriverRoot + strings.TrimPrefix(proc.Binary, f.containerDriverRoot)
		// The driver's libraries, where the pod mounts them.
		dirs := strings.Split(p.LibraryPath, ":")
		for k, dir := range dirs {
			if rest, ok := strings.CutPrefix(dir, f.containerDriverRoot+"/"); ok {
				dirs[k] = mps.PodDriverRoot + "/" + rest
			}
		}
		p.LibraryPath = strings.Join(dirs, ":")
	}
	return p, nil
}

// stopPodDaemons stops the MPS control daemons that run in pods on this node, for a
// plugin that runs them as its children (--mps-control-daemons=process) after one that
// ran them in pods: it starts the prepared claims' daemons itself, and a pod's daemon
// beside one of them would serve the same pipe directory. Without RBAC to list the
// daemons' Deployments (a plugin never installed with pods) there are none to stop.
func stopPodDaemons(client kubernetes.Interface, namespace, node string) error {
	pods := mps.Pods{Client: client, Namespace: namespace, NodeName: node}
	dirs, err := pods.PipeDirs()
	if apierrors.IsForbidden(err) {
		klog.V(2).InfoS("Not allowed to list MPS control daemon pods; none to stop", "namespace", namespace, "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, dir := range dirs {
		klog.InfoS("Stopping an MPS control daemon pod: this plugin runs the daemons itself (--mps-control-daemons=process)", "pipeDir", dir)
		errs = append(errs, pods.Stop(dir))
	}
	return errors.Join(errs...)
}

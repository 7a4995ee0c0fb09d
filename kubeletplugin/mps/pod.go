package mps

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/kubeletplugin/internal/loop"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// A claim's MPS control daemon in a pod of its own (Pods), as NVIDIA's DRA driver runs
// it (a Deployment per claim, pinned to the node): the daemon then lives as long as the
// claim, not as long as the plugin's container. A plugin whose container restarts or is
// rolled to a new version finds the claim's daemon still running, and the claim's
// containers keep working with it. The plugin creates the Deployment when it prepares
// the claim, waits until its pod is ready, and deletes it, waiting until the pod is gone,
// when it unprepares the claim.

// DaemonCommand is the plugin's subcommand that a daemon pod runs (RunDaemon).
const DaemonCommand = "mps-control-daemon"

// Labels and annotation of the daemons' Deployments and pods.
const (
	LabelComponent = "app.kubernetes.io/component"
	Component      = "mps-control-daemon"
)

// PodPrefix begins the name of every daemon's Deployment; the claim's UID ends it.
const PodPrefix = "gpudra-mps-"

// Pods runs each claim's MPS control daemon in a Deployment of one pod, on this node,
// in Namespace. The pod runs Image's gpudra-kubelet-plugin mps-control-daemon, which
// starts nvidia-cuda-mps-control (or, Simulated, a Simulated daemon) with the claim's
// pipe, log and shm directories mounted where the claim's containers have them, and
// stops it when the pod is deleted.
type Pods struct {
	Client    kubernetes.Interface
	Namespace string
	NodeName  string
	// Image is the daemon pod's image (the plugin's own), pulled with PullPolicy (""
	// is IfNotPresent) and PullSecrets (names of Secrets in Namespace), as the plugin's
	// pod pulls it.
	Image       string
	PullPolicy  corev1.PullPolicy
	PullSecrets []string
	// Simulated: the pod runs a Simulated daemon (a simulated NVML backend); the pod
	// is then unprivileged and mounts no driver root.
	Simulated bool
	// Binary is nvidia-cuda-mps-control's path in the pod, under /driver-root, where the
	// pod mounts DriverRoot (a host path); LibraryPath is the pod's LD_LIBRARY_PATH.
	Binary, DriverRoot, LibraryPath string
	// PriorityClassName of the daemon pods ("": none).
	PriorityClassName string
	// ServiceAccountName of the daemon pods: one with no API permissions (its token is
	// not mounted either); "" is the namespace's default.
	ServiceAccountName string
	// Timeout bounds the wait for a daemon's pod to become ready and for a deleted one to
	// go; 0 means 2 min.
	Timeout time.Duration
	// Poll is how often the Deployment is read while waiting; 0 means 250 ms.
	Poll time.Duration
}

var _ Control = Pods{}

// PodDriverRoot is where a daemon pod mounts the node's driver root.
const PodDriverRoot = "/driver-root"

func (p Pods) timeout() time.Duration {
	if p.Timeout > 0 {
		return p.Timeout
	}
	return 2 * time.Minute
}

func (p Pods) poll() time.Duration {
	if p.Poll > 0 {
		return p.Poll
	}
	return 250 * time.Millisecond
}

// Validate says what is missing for daemons in pods.
func (p Pods) Validate() error {
	var missing []string
	for _, f := range []struct{ name, value string }{{"namespace", p.Namespace}, {"node name", p.NodeName}, {"image", p.Image}} {
		if f.value == "" {
			missing = append(missing, f.name)
		}
	}
	if !p.Simulated && (p.Binary == "" || p.DriverRoot == "") {
		missing = append(missing, "nvidia-cuda-mps-control path and driver root")
	}
	if p.Client == nil {
		missing = append(missing, "Kubernetes client")
	}
	if len(missing) > 0 {
		return fmt.Errorf("MPS control daemons in pods need: %s", strings.Join(missing, ", "))
	}
	return nil
}

// PodName is the name of the Deployment of the daemon listening in pipeDir
// (<state>/mps/<claim UID>/pipe).
func PodName(pipeDir string) (name, claimUID string, err error) {
	claimUID = filepath.Base(filepath.Dir(pipeDir))
	name = PodPrefix + claimUID
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 || filepath.Base(pipeDir) != "pipe" || filepath.Base(filepath.Dir(filepath.Dir(pipeDir))) != "mps" {
		return "", "", fmt.Errorf("%s is not a claim's MPS pipe directory (<state>/mps/<claim UID>/pipe)", pipeDir)
	}
	return name, claimUID, nil
}

// daemonArgs are the mps-control-daemon flags that give d, as the pod sees it.
func (p Pods) daemonArgs(d prepared.MPSDaemon) []string {
	args := []string{DaemonCommand, "--pipe-dir=" + cdi.MPSPipeDir, "--log-dir=" + cdi.MPSLogDir,
		"--devices=" + strings.Join(d.Devices, ",")}
	if d.ActiveThreadPercent > 0 {
		args = append(args, "--active-thread-percentage="+strconv.Itoa(d.ActiveThreadPercent))
	}
	if hasLimit(d.PinnedMemoryMiB) {
		mibs := make([]string, len(d.PinnedMemoryMiB))
		for k, m := range d.PinnedMemoryMiB {
			mibs[k] = strconv.FormatInt(m, 10)
		}
		args = append(args, "--pinned-memory-mib="+strings.Join(mibs, ","))
	}
	return append(args, p.daemonFlag())
}

// daemonFlag says which daemon the pod runs: simulated, or the driver's.
func (p Pods) daemonFlag() string {
	if p.Simulated {
		return "--simulated"
	}
	return "--mps-control-daemon=" + p.Binary
}

// deployment is the Deployment that runs d.
func (p Pods) deployment(d prepared.MPSDaemon) (*appsv1.Deployment, error) {
	name, claimUID, err := PodName(d.PipeDir)
	if err != nil {
		return nil, err
	}
	args := p.daemonArgs(d)
	sum := sha256.Sum256([]byte(strings.Join(append([]string{p.Image, d.PipeDir, d.LogDir, d.ShmDir}, args...), "\x00")))
	selector := map[string]string{LabelComponent: Component, api.LabelMPSClaimUID: claimUID}
	podLabels := map[string]string{"app.kubernetes.io/name": "gpudra", api.LabelMPSNode: p.NodeName}
	for k, v := range selector {
		podLabels[k] = v
	}
	hostPath := func(name, path string) corev1.Volume {
		t := corev1.HostPathDirectory
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &t}}}
	}
	volumes := []corev1.Volume{hostPath("pipe", d.PipeDir), hostPath("log", d.LogDir)}
	mounts := []corev1.VolumeMount{{Name: "pipe", MountPath: cdi.MPSPipeDir}, {Name: "log", MountPath: cdi.MPSLogDir}}
	if d.ShmDir != "" {
		volumes = append(volumes, hostPath("shm", d.ShmDir))
		mounts = append(mounts, corev1.VolumeMount{Name: "shm", MountPath: cdi.MPSShmDir})
	}
	security := &corev1.SecurityContext{ReadOnlyRootFilesystem: ptr.To(true)}
	var env []corev1.EnvVar
	if p.Simulated {
		security.AllowPrivilegeEscalation = ptr.To(false)
		security.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
	} else {
		// The claim's GPUs (device-cgroup access to /dev/nvidia*, MIG capabilities), as
		// NVIDIA's daemon pods.
		security.Privileged = ptr.To(true)
		volumes = append(volumes, hostPath("driver-root", p.DriverRoot))
		mounts = append(mounts, corev1.VolumeMount{Name: "driver-root", MountPath: PodDriverRoot, ReadOnly: true})
		if p.LibraryPath != "" {
			env = append(env, corev1.EnvVar{Name: "LD_LIBRARY_PATH", Value: p.LibraryPath})
		}
	}
	check := []string{"gpudra-kubelet-plugin", DaemonCommand, "--check", "--pipe-dir=" + cdi.MPSPipeDir, p.daemonFlag()}
	var secrets []corev1.LocalObjectReference
	for _, name := range p.PullSecrets {
		secrets = append(secrets, corev1.LocalObjectReference{Name: name})
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: p.Namespace, Labels: podLabels,
			Annotations: map[string]string{api.AnnotationMPSPipeDir: d.PipeDir, api.AnnotationMPSDaemonSpec: hex.EncodeToString(sum[:12])},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			// Never two daemons on one pipe directory.
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec: corev1.PodSpec{
					// Bound to this node by name, as the claim is: no scheduling, every taint
					// tolerated (the claim's pods run here).
					NodeName:                      p.NodeName,
					Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					PriorityClassName:             p.PriorityClassName,
					ServiceAccountName:            p.ServiceAccountName,
					AutomountServiceAccountToken:  ptr.To(false),
					EnableServiceLinks:            ptr.To(false),
					ImagePullSecrets:              secrets,
					TerminationGracePeriodSeconds: ptr.To(int64(30)),
					Containers: []corev1.Container{{
						Name: Component, Image: p.Image, ImagePullPolicy: cmp.Or(p.PullPolicy, corev1.PullIfNotPresent),
						Command: []string{"gpudra-kubelet-plugin"}, Args: args, Env: env,
						VolumeMounts: mounts, SecurityContext: security,
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: check}},
							PeriodSeconds: 1, TimeoutSeconds: 10, FailureThreshold: 3,
						},
						// No requests: the pod always passes the kubelet's resource admission.
						// With requests, a daemon of a critical priority class (the chart gives
						// it the plugin's, system-node-critical) on a node whose CPU or memory
						// is fully requested would make the kubelet evict a workload pod to fit
						// it. A critical pod is never evicted under node pressure, and a
						// system-node-critical one gets a Guaranteed pod's OOM score whatever
						// its requests.
					}},
					Volumes: volumes,
				},
			},
		},
	}, nil
}

// Start implements Control: Create, then WaitReady. A daemon that does not become
// ready is deleted again, and the error says why its pod is not.
func (p Pods) Start(d prepared.MPSDaemon) (int, error) {
	if err := p.Create(d); err != nil {
		return 0, err
	}
	if err := p.WaitReady(context.Background(), d.PipeDir); err != nil {
		return 0, errors.Join(err, p.Stop(d.PipeDir))
	}
	return 0, nil
}

// Create creates the daemon's Deployment, or finds the one an earlier plugin made for
// the same daemon. One made for another daemon is deleted, and one being deleted is left
// to go: Create fails then, without waiting, and a later try makes the new one.
func (p Pods) Create(d prepared.MPSDaemon) error {
	want, err := p.deployment(d)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout())
	defer cancel()
	deployments := p.Client.AppsV1().Deployments(p.Namespace)
	_, err = deployments.Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var have *appsv1.Deployment
		have, err = deployments.Get(ctx, want.Name, metav1.GetOptions{})
		switch {
		case err != nil:
		case have.DeletionTimestamp != nil:
			err = ErrDaemonGoing
		case have.Annotations[api.AnnotationMPSDaemonSpec] != want.Annotations[api.AnnotationMPSDaemonSpec]:
			klog.Background().Info("Deleting an MPS control daemon's Deployment made for another daemon: the claim's is made once it is gone", "deployment", klog.KObj(have))
			if _, err = p.Delete(d.PipeDir); err == nil {
				err = ErrDaemonGoing
			}
		}
	}
	if err != nil {
		return fmt.Errorf("creating Deployment %s/%s of the MPS control daemon: %w", p.Namespace, want.Name, err)
	}
	return nil
}

// WaitReady waits until the Deployment of the daemon listening in pipeDir has a ready
// pod, for at most Timeout.
func (p Pods) WaitReady(ctx context.Context, pipeDir string) error {
	ready := func(dep *appsv1.Deployment, err error) bool {
		return err == nil && dep.Status.ObservedGeneration >= dep.Generation && dep.Status.ReadyReplicas > 0
	}
	return p.waitFor(ctx, pipeDir, ready, func(name string, dep *appsv1.Deployment, waited time.Duration) error {
		return fmt.Errorf("the MPS control daemon's pod (Deployment %s/%s on node %s) is not ready after %s: %s", p.Namespace, name, p.NodeName, waited, p.whyNotReady(name, dep))
	})
}

// waitFor reads the Deployment of the daemon listening in pipeDir every Poll until done
// says so of what it read, for at most Timeout or until ctx ends; then failed is the
// error, given the Deployment last read and how long it waited.
func (p Pods) waitFor(ctx context.Context, pipeDir string, done func(*appsv1.Deployment, error) bool, failed func(name string, dep *appsv1.Deployment, waited time.Duration) error) error {
	name, _, err := PodName(pipeDir)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout())
	defer cancel()
	deployments := p.Client.AppsV1().Deployments(p.Namespace)
	start := time.Now()
	for {
		dep, err := deployments.Get(ctx, name, metav1.GetOptions{})
		if done(dep, err) {
			return nil
		}
		if err != nil && ctx.Err() == nil && !apierrors.IsNotFound(err) {
			klog.Background().V(4).Info("Reading an MPS control daemon's Deployment", "deployment", klog.KRef(p.Namespace, name), "err", err)
		}
		select {
		case <-ctx.Done():
			return failed(name, dep, time.Since(start).Round(time.Millisecond))
		case <-time.After(p.poll()):
		}
	}
}

// whyNotReady says what the Deployment's pods wait for, for an error message.
func (p Pods) whyNotReady(name string, dep *appsv1.Deployment) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, claimUID, _ := strings.Cut(name, PodPrefix)
	pods, err := p.Client.CoreV1().Pods(p.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{LabelComponent: Component, api.LabelMPSClaimUID: claimUID}).String(),
	})
	var why []string
	if err != nil {
		why = append(why, "listing its pods: "+err.Error())
	} else {
		for _, pod := range pods.Items {
			s := fmt.Sprintf("pod %s is %s", pod.Name, pod.Status.Phase)
			for _, c := range pod.Status.ContainerStatuses {
				switch {
				case c.State.Waiting != nil:
					s += fmt.Sprintf(", container waiting: %s %s", c.State.Waiting.Reason, c.State.Waiting.Message)
				case c.State.Terminated != nil:
					s += fmt.Sprintf(", container exited %d: %s %s", c.State.Terminated.ExitCode, c.State.Terminated.Reason, c.State.Terminated.Message)
				case !c.Ready:
					s += ", container running, not ready (see its log)"
				}
				if c.RestartCount > 0 {
					s += fmt.Sprintf(", %d restarts", c.RestartCount)
				}
			}
			why = append(why, s)
		}
		if len(pods.Items) == 0 {
			why = append(why, "no pod")
		}
	}
	if dep != nil {
		for _, c := range dep.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				why = append(why, fmt.Sprintf("Deployment %s: %s %s", c.Type, c.Reason, c.Message))
			}
		}
	}
	return strings.Join(why, "; ")
}

// Running implements Control: whether the daemon's Deployment exists and is not being
// deleted. Kubernetes keeps its pod running (restarts it when it fails, or after a node
// reboot); the plugin only makes and deletes it.
func (p Pods) Running(pipeDir string) (bool, error) {
	name, _, err := PodName(pipeDir)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dep, err := p.Client.AppsV1().Deployments(p.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil && dep.DeletionTimestamp == nil, err
}

// Stop implements Control: Delete, then WaitGone, so that the daemon has quit
// before the claim's directories go.
func (p Pods) Stop(pipeDir string) error {
	if _, err := p.Delete(pipeDir); err != nil {
		return err
	}
	return p.WaitGone(context.Background(), pipeDir)
}

// Delete deletes the daemon's Deployment, its pods first (foreground deletion), without
// waiting for it to go, and reports whether it is gone already. A daemon that is not
// there, or is being deleted, is no error.
func (p Pods) Delete(pipeDir string) (gone bool, err error) {
	name, _, err := PodName(pipeDir)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	deployments := p.Client.AppsV1().Deployments(p.Namespace)
	err = deployments.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
	if err == nil {
		_, err = deployments.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			return false, nil
		}
	}
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	return false, fmt.Errorf("deleting Deployment %s/%s of the MPS control daemon: %w", p.Namespace, name, err)
}

// WaitGone waits until the Deployment of the daemon listening in pipeDir is gone, for at
// most Timeout, or until ctx ends.
func (p Pods) WaitGone(ctx context.Context, pipeDir string) error {
	gone := func(_ *appsv1.Deployment, err error) bool { return apierrors.IsNotFound(err) }
	return p.waitFor(ctx, pipeDir, gone, func(name string, _ *appsv1.Deployment, waited time.Duration) error {
		return fmt.Errorf("the MPS control daemon's Deployment %s/%s is not gone %s after its deletion: %s", p.Namespace, name, waited, p.whyNotReady(name, nil))
	})
}

// PipeDirs are the pipe directories of the daemons that run in pods on this node (for
// the start-up clean-up of daemons no claim accounts for).
func (p Pods) PipeDirs() ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := p.Client.AppsV1().Deployments(p.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{LabelComponent: Component, api.LabelMPSNode: p.NodeName}).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("listing the MPS control daemons' Deployments on node %s: %w", p.NodeName, err)
	}
	var dirs []string
	for _, dep := range list.Items {
		if dir := dep.Annotations[api.AnnotationMPSPipeDir]; dir != "" {
			dirs = append(dirs, dir)
		}
	}
	return dirs, nil
}

// RunDaemon is a daemon pod's process: it starts the daemon with ctl, watches it, and
// stops it when ctx ends (the pod is deleted). It returns an error when the daemon stops
// on its own, so that the pod's container restarts it.
func RunDaemon(ctx context.Context, ctl Control, d prepared.MPSDaemon, every time.Duration) error {
	logger := klog.FromContext(ctx)
	pid, err := ctl.Start(d)
	if err != nil {
		return err
	}
	logger.Info("MPS control daemon running", "pid", pid, "devices", d.Devices, "pipeDir", d.PipeDir,
		"activeThreadPercentage", d.ActiveThreadPercent, "pinnedMemoryMiB", d.PinnedMemoryMiB)
	var exited error
	loop.After(ctx, every, func(context.Context) (done bool) {
		running, err := ctl.Running(d.PipeDir)
		if err != nil {
			logger.Error(err, "Checking the MPS control daemon")
		} else if !running {
			exited = fmt.Errorf("the MPS control daemon in %s exited; its log: %s", d.PipeDir, tail(filepath.Join(d.LogDir, "control.log")))
		}
		return exited != nil
	})
	if exited != nil {
		return exited
	}
	logger.Info("Stopping the MPS control daemon", "pipeDir", d.PipeDir)
	return ctl.Stop(d.PipeDir)
}

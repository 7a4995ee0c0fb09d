package kubeletplugin_test

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	plugin "github.com/gpudra/gpudra/kubeletplugin"
	"github.com/gpudra/gpudra/kubeletplugin/mps"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

const mpsNamespace = "gpudra-system"

// mpsPods are mps.Pods on a fake API server. With ready, every Deployment created is at
// once reported with a ready pod, as the Deployment controller and the kubelet would
// after a while.
func mpsPods(t testing.TB, ready bool) (mps.Pods, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset()
	if ready {
		client.PrependReactor("create", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
			dep := a.(k8stesting.CreateAction).GetObject().(*appsv1.Deployment)
			dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
			return false, nil, nil
		})
	}
	return mps.Pods{Client: client, Namespace: mpsNamespace, NodeName: nodeName, Image: "ghcr.io/gpudra/gpudra:test",
		Simulated: true, Timeout: 2 * time.Second, Poll: 10 * time.Millisecond}, client
}

func deploymentsOf(t testing.TB, client *fake.Clientset) map[string]appsv1.Deployment {
	t.Helper()
	list, err := client.AppsV1().Deployments(mpsNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deps := map[string]appsv1.Deployment{}
	for _, d := range list.Items {
		deps[d.Name] = d
	}
	return deps
}

// podHostPaths are the pod's mounts: container path → host path.
func podHostPaths(spec corev1.PodSpec) map[string]string {
	vols := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			vols[v.Name] = v.HostPath.Path
		}
	}
	mounts := map[string]string{}
	for _, m := range spec.Containers[0].VolumeMounts {
		mounts[m.MountPath] = vols[m.Name]
	}
	return mounts
}

// An MPS claim's daemon runs in a Deployment of its own on the node: with the claim's
// directories where the claim's containers have them, the claim's devices and limits;
// a restarted plugin keeps it; unprepare deletes it.
func TestMPSClaimDaemonRunsInAPodOfItsOwn(t *testing.T) {
	pods, client := mpsPods(t, true)
	n := newNode(t, "dgx-h100", func(c *plugin.Config) { c.MPS = pods })
	d := n.newDriver(nil)
	c := n.allocate(gpuClaim("2", mpsConfig))
	mustPrepare(t, d, c)
	deps := deploymentsOf(t, client)
	dep, ok := deps[mps.PodPrefix+string(c.UID)]
	if len(deps) != 1 || !ok {
		t.Fatalf("Deployments %v, want one named %s", deps, mps.PodPrefix+string(c.UID))
	}
	pod := dep.Spec.Template.Spec
	if pod.NodeName != nodeName || *dep.Spec.Replicas != 1 || dep.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("Deployment: node %q, replicas %d, strategy %s; want %s, 1, Recreate", pod.NodeName, *dep.Spec.Replicas, dep.Spec.Strategy.Type, nodeName)
	}
	if len(pod.Tolerations) != 1 || pod.Tolerations[0].Operator != corev1.TolerationOpExists || pod.Tolerations[0].Key != "" {
		t.Errorf("tolerations %v, want every taint tolerated (the claim's pods run on the node)", pod.Tolerations)
	}
	pipe, log := mpsMounts(t, n, c)
	shm := mpsShm(t, n, c)
	want := map[string]string{"/tmp/nvidia-mps": pipe, "/var/log/nvidia-mps": log, "/dev/shm": shm}
	if got := podHostPaths(pod); !maps.Equal(got, want) {
		t.Errorf("daemon pod mounts %v, want the claim's directories where its containers have them %v", got, want)
	}
	ctr := pod.Containers[0]
	wantArgs := []string{"mps-control-daemon", "--pipe-dir=/tmp/nvidia-mps", "--log-dir=/var/log/nvidia-mps",
		"--devices=" + d.Inventory().GPU(2).UUID, "--active-thread-percentage=50", "--pinned-memory-mib=20480", "--simulated"}
	if ctr.Image != pods.Image || !slices.Equal(ctr.Command, []string{"gpudra-kubelet-plugin"}) || !slices.Equal(ctr.Args, wantArgs) {
		t.Errorf("daemon container %s %v %v, want %s gpudra-kubelet-plugin %v", ctr.Image, ctr.Command, ctr.Args, pods.Image, wantArgs)
	}
	if s := ctr.SecurityContext; s.Privileged != nil && *s.Privileged || s.Capabilities == nil || !slices.Equal(s.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("a simulated daemon's container is privileged or keeps capabilities: %+v", s)
	}
	if p := ctr.ReadinessProbe; p == nil || p.Exec == nil || !slices.Contains(p.Exec.Command, "--check") {
		t.Errorf("readiness probe %+v, want the daemon's --check", p)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the daemon pod gets a service-account token it has no use for")
	}
	// A request would let a critical daemon pod evict a workload pod from a full node.
	if len(ctr.Resources.Requests) != 0 || len(ctr.Resources.Limits) != 0 {
		t.Errorf("daemon container resources %+v, want none", ctr.Resources)
	}

	// A restarted plugin (a new container, a rolling update) finds the daemon and keeps it.
	d = n.newDriver(nil)
	mustPrepare(t, d, c)
	if after := deploymentsOf(t, client)[dep.Name]; after.UID != dep.UID {
		t.Errorf("the daemon's Deployment was made again after a plugin restart (UID %s → %s)", dep.UID, after.UID)
	}
	if err := unprepare(t, d, c); err != nil {
		t.Fatal(err)
	}
	if deps := deploymentsOf(t, client); len(deps) != 0 {
		t.Errorf("Deployments left after unprepare: %v", deps)
	}
	assertClean(t, n, c)
}

// A daemon whose pod is not ready fails the prepare with what its pod waits for; the
// claim stays prepared, and the kubelet's next try, once the pod is ready, succeeds.
func TestMPSPodThatIsNotReadyFailsThePrepareSayingWhy(t *testing.T) {
	pods, client := mpsPods(t, false)
	pods.Timeout = 300 * time.Millisecond
	n := newNode(t, "dgx-h100", func(c *plugin.Config) { c.MPS = pods })
	n.daemonPods = client
	c := n.allocate(gpuClaim("2", mpsConfig))
	// Its pod cannot pull the image.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: mps.PodPrefix + string(c.UID) + "-abc", Namespace: mpsNamespace,
			Labels: map[string]string{mps.LabelComponent: mps.Component, api.LabelMPSClaimUID: string(c.UID)}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
			Name: "mps-control-daemon", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image"}},
		}}},
	}
	if _, err := client.CoreV1().Pods(mpsNamespace).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d := n.newDriver(nil)
	_, err := prepare(t, d, c)
	if err == nil || !strings.Contains(err.Error(), "ImagePullBackOff") || !strings.Contains(err.Error(), mps.PodPrefix+string(c.UID)) {
		t.Fatalf("prepare error %v, want one naming the daemon's Deployment and ImagePullBackOff", err)
	}
	if got := n.daemons(t); len(got) != 1 || n.spec(c) == nil {
		t.Fatalf("after the failed wait: daemons %v, spec %v; want the claim still prepared", got, n.spec(c) != nil)
	}
	markReady(t, client, mps.PodPrefix+string(c.UID))
	mustPrepare(t, d, c)
	if err := unprepare(t, d, c); err != nil {
		t.Fatal(err)
	}
	assertClean(t, n, c)
}

// markReady reports the Deployment's pod ready, as the kubelet and the Deployment
// controller would.
func markReady(t *testing.T, client *fake.Clientset, name string) {
	t.Helper()
	deps := client.AppsV1().Deployments(mpsNamespace)
	dep, err := deps.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dep.Status.ReadyReplicas = 1
	if _, err := deps.UpdateStatus(context.Background(), dep, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// While an MPS claim's prepare waits for its daemon's pod, the node's other prepares do
// not wait behind it.
func TestOtherPreparesDoNotWaitForAnMPSPod(t *testing.T) {
	pods, client := mpsPods(t, false)
	pods.Timeout = time.Minute
	n := newNode(t, "dgx-h100", func(c *plugin.Config) { c.MPS = pods })
	d := n.newDriver(nil)
	mpsClaim, whole := n.allocate(gpuClaim("2", mpsConfig)), n.allocate(gpuClaim("5", ""))
	done := make(chan error, 1)
	go func() { _, err := prepare(t, d, mpsClaim); done <- err }()
	waitFor(t, func() bool { return len(deploymentsOf(t, client)) == 1 })
	mustPrepare(t, d, whole) // returns while the MPS claim still waits
	select {
	case err := <-done:
		t.Fatalf("the MPS claim's prepare returned (%v) before its daemon was ready", err)
	default:
	}
	markReady(t, client, mps.PodPrefix+string(mpsClaim.UID))
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the MPS claim's prepare did not return once its daemon was ready")
	}
}

// A plugin that starts removes the daemon pods of its node that no prepared claim
// accounts for, and leaves other nodes' alone.
func TestMPSPodsOfUnknownClaimsAreDeletedAtStartUp(t *testing.T) {
	pods, client := mpsPods(t, true)
	other := pods
	other.NodeName = "node-b"
	n := newNode(t, "dgx-h100", func(c *plugin.Config) { c.MPS = pods })
	orphan := prepared.MPSDaemon{PipeDir: filepath.Join(t.TempDir(), "mps", "0b7e6a5c-1f1e-4b7e-9f55-000000000001", "pipe"), Devices: []string{"GPU-x"}}
	elsewhere := prepared.MPSDaemon{PipeDir: filepath.Join(t.TempDir(), "mps", "0b7e6a5c-1f1e-4b7e-9f55-000000000002", "pipe"), Devices: []string{"GPU-y"}}
	if _, err := pods.Start(orphan); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Start(elsewhere); err != nil {
		t.Fatal(err)
	}
	d := n.newDriver(nil)
	c := n.allocate(gpuClaim("2", mpsConfig))
	mustPrepare(t, d, c)
	n.newDriver(nil) // the prepared claim's daemon is known, and stays
	deps := deploymentsOf(t, client)
	got := slices.Sorted(maps.Keys(deps))
	want := []string{mps.PodPrefix + "0b7e6a5c-1f1e-4b7e-9f55-000000000002", mps.PodPrefix + string(c.UID)}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("Deployments after start-up %v, want the other node's and the prepared claim's %v", got, want)
	}
}

// On a node with the real NVML, the daemon pod runs the driver's nvidia-cuda-mps-control
// from the node's driver root, privileged (the claim's GPUs, MIG capabilities), with the
// driver's libraries.
func TestMPSPodOfARealNodeRunsTheDriversDaemon(t *testing.T) {
	pods, client := mpsPods(t, true)
	pods.Simulated = false
	pods.DriverRoot, pods.Binary, pods.LibraryPath = "/run/nvidia/driver", "/driver-root/usr/bin/nvidia-cuda-mps-control", "/driver-root/usr/lib64"
	pods.PullPolicy, pods.PullSecrets = corev1.PullAlways, []string{"regcred"}
	pipe := filepath.Join(t.TempDir(), "mps", "0b7e6a5c-1f1e-4b7e-9f55-000000000003", "pipe")
	if _, err := pods.Start(prepared.MPSDaemon{PipeDir: pipe, LogDir: filepath.Join(filepath.Dir(pipe), "log"), Devices: []string{"MIG-1", "MIG-2"}}); err != nil {
		t.Fatal(err)
	}
	dep := deploymentsOf(t, client)[mps.PodPrefix+"0b7e6a5c-1f1e-4b7e-9f55-000000000003"]
	pod := dep.Spec.Template.Spec
	ctr := pod.Containers[0]
	if s := ctr.SecurityContext; s.Privileged == nil || !*s.Privileged {
		t.Errorf("the daemon container is not privileged: %+v", s)
	}
	if ctr.ImagePullPolicy != corev1.PullAlways || len(pod.ImagePullSecrets) != 1 || pod.ImagePullSecrets[0].Name != "regcred" {
		t.Errorf("pulled with %s and secrets %v, want Always and regcred", ctr.ImagePullPolicy, pod.ImagePullSecrets)
	}
	if got := podHostPaths(pod)["/driver-root"]; got != pods.DriverRoot {
		t.Errorf("driver root mounted from %q, want %q", got, pods.DriverRoot)
	}
	if !slices.Contains(ctr.Args, "--mps-control-daemon="+pods.Binary) || !slices.Contains(ctr.Args, "--devices=MIG-1,MIG-2") || slices.Contains(ctr.Args, "--simulated") {
		t.Errorf("daemon args %v", ctr.Args)
	}
	if _, shm := podHostPaths(pod)["/dev/shm"]; shm {
		t.Error("a daemon recorded without a shm directory mounts one")
	}
	if len(ctr.Env) != 1 || ctr.Env[0].Value != pods.LibraryPath {
		t.Errorf("daemon env %v, want LD_LIBRARY_PATH=%s", ctr.Env, pods.LibraryPath)
	}
	// Stopping it waits until it is gone; stopping it again is no error.
	if err := pods.Stop(pipe); err != nil {
		t.Fatal(err)
	}
	if running, err := pods.Running(pipe); running || err != nil {
		t.Errorf("after Stop: running %v (%v)", running, err)
	}
	if err := pods.Stop(pipe); err != nil {
		t.Errorf("a second Stop: %v", err)
	}
	if _, err := pods.Start(prepared.MPSDaemon{PipeDir: "/var/lib/x/pipe"}); err == nil {
		t.Error("Start with a pipe directory that is not a claim's: no error")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(errors.New("timed out"))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// newMPSPodsNode is a node whose plugins run MPS control daemons in pods, on a fake API
// server that reports every daemon pod ready.
func newMPSPodsNode(t testing.TB) *node {
	pods, client := mpsPods(t, true)
	n := newNode(t, "dgx-h100", func(c *plugin.Config) { c.MPS = pods })
	n.daemonPods = client
	return n
}

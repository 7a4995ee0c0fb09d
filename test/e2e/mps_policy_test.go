//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"path"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// mpsDaemonPins are what admission policy gpudra-mps-daemon-pods, as installed, lets a plugin
// put in an MPS control daemon's pod: read from the policy's own variables, so that the test
// builds daemons of the lab's pools, whatever their directories.
type mpsDaemonPins struct {
	image, serviceAccount          string
	dataDirs, driverRoots, daemons []string
}

func readMPSDaemonPins(t *testing.T) mpsDaemonPins {
	t.Helper()
	policy, err := client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(t.Context(), "gpudra-mps-daemon-pods", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the MPS daemon pod policy: %v", err)
	}
	var pins mpsDaemonPins
	for _, v := range policy.Spec.Variables {
		var into any
		switch v.Name {
		case "image":
			into = &pins.image
		case "serviceAccount":
			into = &pins.serviceAccount
		case "dataDirs":
			into = &pins.dataDirs
		case "driverRoots":
			into = &pins.driverRoots
		case "daemons":
			into = &pins.daemons
		default:
			continue
		}
		if err := json.Unmarshal([]byte(v.Expression), into); err != nil {
			t.Fatalf("variable %s of the MPS daemon pod policy is no literal: %s: %v", v.Name, v.Expression, err)
		}
	}
	return pins
}

// daemon is an MPS control daemon Deployment as a plugin of node makes it, no replicas (only
// the admission decision matters), unprivileged (as with a simulated NVML), mounting no
// directory.
func (p mpsDaemonPins) daemon(name, node string) *appsv1.Deployment {
	labels := map[string]string{"app.kubernetes.io/component": "mps-control-daemon", "gpu.gpudra.dev/mps-node": node}
	daemon := "--simulated"
	if len(p.daemons) > 0 {
		daemon = p.daemons[0]
	}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				NodeName: node, ServiceAccountName: p.serviceAccount, AutomountServiceAccountToken: ptr.To(false),
				Containers: []corev1.Container{{Name: "mps-control-daemon", Image: p.image,
					Command: []string{"gpudra-kubelet-plugin"},
					Args:    []string{"mps-control-daemon", "--pipe-dir=/tmp/nvidia-mps", "--log-dir=/var/log/nvidia-mps", "--devices=GPU-e2e", daemon},
					SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
						Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				}}}}}}
}

// testMPSDaemonPolicies: a plugin identity of nodeA may make and delete MPS control daemons of
// its own node, named gpudra-mps-<claim UID>, in its namespace, and only as the chart's plugins
// make them: each field the policy pins, changed, is refused with the policy's message.
func testMPSDaemonPolicies(t *testing.T, as kubernetes.Interface, nodeA, nodeB string) {
	pins := readMPSDaemonPins(t)
	if pins.image == "" || pins.serviceAccount == "" {
		t.Fatalf("the MPS daemon pod policy pins no image or ServiceAccount: %+v", pins)
	}
	deployments := as.AppsV1().Deployments("gpudra")
	create := func(d *appsv1.Deployment) error {
		_, err := deployments.Create(t.Context(), d, metav1.CreateOptions{})
		if err == nil {
			t.Cleanup(func() {
				_ = client.AppsV1().Deployments("gpudra").Delete(context.Background(), d.Name, metav1.DeleteOptions{})
			})
		}
		return err
	}
	if len(pins.daemons) == 0 {
		// No pool of this lab runs daemons in pods (kwok pools run them as processes and the
		// real node is left out): then a plugin may make none at all.
		if err := create(pins.daemon("gpudra-mps-e2e-none", nodeA)); err == nil || !strings.Contains(err.Error(), "must run gpudra-kubelet-plugin mps-control-daemon") {
			t.Errorf("a daemon in a lab where no pool runs daemons in pods: err = %v, want it refused", err)
		}
		labLacks(t, "a chart pool that runs MPS daemons in pods (the real node, install: chart): the field-by-field refusals need one")
	}

	if err := create(pins.daemon("gpudra-mps-e2e-own", nodeA)); err != nil {
		t.Errorf("the plugin of %s may not make an MPS daemon of its own node: %v", nodeA, err)
	} else if err := deployments.Delete(t.Context(), "gpudra-mps-e2e-own", metav1.DeleteOptions{}); err != nil {
		t.Errorf("the plugin may not delete its own node's MPS daemon: %v", err)
	}
	if err := create(pins.daemon("gpudra-mps-e2e-other", nodeB)); err == nil || !strings.Contains(err.Error(), "may not write MPS control daemons of node "+nodeB) {
		t.Errorf("the plugin of %s made an MPS daemon on %s: err = %v", nodeA, nodeB, err)
	}
	if err := create(pins.daemon("miner", nodeA)); err == nil || !strings.Contains(err.Error(), "only write MPS control daemon Deployments") {
		t.Errorf("the plugin made a Deployment that is no MPS daemon: err = %v", err)
	}
	if _, err := as.AppsV1().Deployments("default").Create(t.Context(), pins.daemon("gpudra-mps-e2e-ns", nodeA), metav1.CreateOptions{}); err == nil {
		t.Error("the plugin identity may make Deployments outside its namespace")
	}
	// A daemon made before these pins (here by the cluster's admin) can still be deleted by
	// its node's plugin.
	old := pins.daemon("gpudra-mps-e2e-old", nodeA)
	old.Spec.Template.Spec.ServiceAccountName = ""
	old.Spec.Template.Spec.Containers[0].Image = "registry.k8s.io/pause:3.10"
	if _, err := client.AppsV1().Deployments("gpudra").Create(t.Context(), old, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := deployments.Delete(t.Context(), old.Name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("the plugin may not delete an earlier daemon of its node: %v", err)
	}
	if len(pins.dataDirs) > 0 {
		withDirs := pins.daemon("gpudra-mps-e2e-dirs", nodeA)
		withDirs.Spec.Template.Spec.Volumes = []corev1.Volume{hostPathVolume("pipe", path.Join(pins.dataDirs[0], "mps", "e2e-dirs", "pipe"))}
		withDirs.Spec.Template.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "pipe", MountPath: "/tmp/nvidia-mps"}}
		if err := create(withDirs); err != nil {
			t.Errorf("a daemon mounting its claim's pipe directory is refused: %v", err)
		}
	}

	spec := func(d *appsv1.Deployment) *corev1.PodSpec { return &d.Spec.Template.Spec }
	ctr := func(d *appsv1.Deployment) *corev1.Container { return &d.Spec.Template.Spec.Containers[0] }
	dataDir := "/var/lib/kubelet/plugins/gpu.gpudra.dev"
	if len(pins.dataDirs) > 0 {
		dataDir = pins.dataDirs[0]
	}
	for _, tc := range []struct {
		name   string
		change func(*appsv1.Deployment)
		want   string
	}{
		{"image", func(d *appsv1.Deployment) { ctr(d).Image = "docker.io/library/busybox:latest" }, "image of an MPS control daemon must be " + pins.image},
		{"service-account", func(d *appsv1.Deployment) { spec(d).ServiceAccountName = "gpudra-controller" }, "serviceAccountName of an MPS control daemon must be " + pins.serviceAccount},
		{"token", func(d *appsv1.Deployment) { spec(d).AutomountServiceAccountToken = ptr.To(true) }, "automountServiceAccountToken of an MPS control daemon must be false"},
		{"host-network", func(d *appsv1.Deployment) { spec(d).HostNetwork = true }, "may not use the node's network, PID or IPC namespace"},
		{"host-pid", func(d *appsv1.Deployment) { spec(d).HostPID = true }, "may not use the node's network, PID or IPC namespace"},
		{"host-ipc", func(d *appsv1.Deployment) { spec(d).HostIPC = true }, "may not use the node's network, PID or IPC namespace"},
		{"containers", func(d *appsv1.Deployment) {
			spec(d).Containers = append(spec(d).Containers, corev1.Container{Name: "miner", Image: pins.image})
		}, "exactly one container"},
		{"init-containers", func(d *appsv1.Deployment) {
			spec(d).InitContainers = []corev1.Container{{Name: "setup", Image: pins.image}}
		}, "no initContainers"},
		{"command", func(d *appsv1.Deployment) { ctr(d).Command, ctr(d).Args = []string{"sh"}, []string{"-c", "id"} }, "must run gpudra-kubelet-plugin mps-control-daemon"},
		{"daemon-binary", func(d *appsv1.Deployment) {
			ctr(d).Args[len(ctr(d).Args)-1] = "--mps-control-daemon=/driver-root/usr/bin/nsenter"
		}, "must run gpudra-kubelet-plugin mps-control-daemon"},
		{"probe", func(d *appsv1.Deployment) {
			ctr(d).ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "id"}}}}
		}, "only probe of an MPS control daemon is its readiness check"},
		{"env", func(d *appsv1.Deployment) { ctr(d).Env = []corev1.EnvVar{{Name: "LD_PRELOAD", Value: "/x.so"}} }, "env of an MPS control daemon is empty"},
		// A library path into a directory the token's holder can write (the claim's pipe
		// directory), for a daemon that would load what is there.
		{"env-value", func(d *appsv1.Deployment) {
			ctr(d).Env = []corev1.EnvVar{{Name: "LD_LIBRARY_PATH", Value: "/tmp/nvidia-mps"}}
		}, "env of an MPS control daemon is empty"},
		{"mount-path", func(d *appsv1.Deployment) {
			spec(d).Volumes = []corev1.Volume{hostPathVolume("pipe", path.Join(dataDir, "mps", "e2e-mount-path", "pipe"))}
			ctr(d).VolumeMounts = []corev1.VolumeMount{{Name: "pipe", MountPath: "/usr/bin"}}
		}, "volumeMounts of an MPS control daemon mount pipe at /tmp/nvidia-mps"},
		{"sub-path", func(d *appsv1.Deployment) {
			spec(d).Volumes = []corev1.Volume{hostPathVolume("pipe", path.Join(dataDir, "mps", "e2e-sub-path", "pipe"))}
			ctr(d).VolumeMounts = []corev1.VolumeMount{{Name: "pipe", MountPath: "/tmp/nvidia-mps", SubPath: "x"}}
		}, "volumeMounts of an MPS control daemon mount pipe at /tmp/nvidia-mps"},
		{"pod-security", func(d *appsv1.Deployment) {
			spec(d).SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](0)}
		}, "(securityContext empty)"},
		{"working-dir", func(d *appsv1.Deployment) { ctr(d).WorkingDir = "/tmp" }, "not workingDir"},
		{"host-path", func(d *appsv1.Deployment) {
			spec(d).Volumes = []corev1.Volume{hostPathVolume("pipe", "/etc")}
			ctr(d).VolumeMounts = []corev1.VolumeMount{{Name: "pipe", MountPath: "/tmp/nvidia-mps"}}
		}, "may only be host paths"},
		{"other-claim", func(d *appsv1.Deployment) {
			spec(d).Volumes = []corev1.Volume{hostPathVolume("pipe", path.Join(dataDir, "mps", "another-claim", "pipe"))}
			ctr(d).VolumeMounts = []corev1.VolumeMount{{Name: "pipe", MountPath: "/tmp/nvidia-mps"}}
		}, "may only be host paths"},
		{"privileged", func(d *appsv1.Deployment) { ctr(d).SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)} }, "securityContext of an MPS control daemon is exactly"},
		{"capabilities", func(d *appsv1.Deployment) {
			ctr(d).SecurityContext.Capabilities.Add = []corev1.Capability{"SYS_ADMIN"}
		}, "securityContext of an MPS control daemon is exactly"},
		{"escalation", func(d *appsv1.Deployment) { ctr(d).SecurityContext.AllowPrivilegeEscalation = nil }, "securityContext of an MPS control daemon is exactly"},
		{"replicas", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](20) }, "at most 1 replica"},
	} {
		d := pins.daemon("gpudra-mps-e2e-"+tc.name, nodeA)
		tc.change(d)
		if err := create(d); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("a daemon with its %s changed: err = %v, want it refused saying %q", tc.name, err, tc.want)
		}
	}
	if slices.Contains(pins.daemons, "--simulated") && len(pins.driverRoots) == 0 {
		// Simulated pools only: no driver root a daemon could mount.
		d := pins.daemon("gpudra-mps-e2e-root", nodeA)
		d.Spec.Template.Spec.Volumes = []corev1.Volume{hostPathVolume("driver-root", "/")}
		if err := create(d); err == nil || !strings.Contains(err.Error(), "a driver root of the chart's pools") {
			t.Errorf("a daemon mounting / in a lab of simulated pools: err = %v, want it refused", err)
		}
	}
}

// hostPathVolume is a host directory volume, as the plugin mounts its claims' directories.
func hostPathVolume(name, p string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: p, Type: ptr.To(corev1.HostPathDirectory)}}}
}

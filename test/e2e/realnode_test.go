package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/test/lab"
)

// Tests on the lab's real node: a kubelet with containerd and runc that calls
// gpudra-kubelet-plugin to prepare claims and starts real containers with the CDI devices.

// realNode returns the lab's real node, or skips the test saying what the machine lacks.
func realNode(t *testing.T) string {
	t.Helper()
	node, err := state.RealNodeAvailable()
	if err != nil {
		t.Skipf("no real node in this lab: %v", err)
	}
	return node
}

// probeReport is what the probe container printed: device nodes, environment, extra mounts.
type probeReport struct {
	devices map[string]string // path → "char 195:3"
	env     map[string]string
	mounts  []string
	raw     string
}

func parseProbe(out string) probeReport {
	r := probeReport{devices: map[string]string{}, env: map[string]string{}, raw: out}
	for _, line := range strings.Split(out, "\n") {
		kind, rest, _ := strings.Cut(line, " ")
		switch kind {
		case "device":
			path, what, _ := strings.Cut(rest, " ")
			r.devices[path] = what
		case "env":
			k, v, _ := strings.Cut(rest, "=")
			r.env[k] = v
		case "mount":
			r.mounts = append(r.mounts, rest)
		}
	}
	return r
}

// gpuNodes are the /dev/nvidia<N> GPU device nodes of a report, sorted.
func (r probeReport) gpuNodes() []string {
	var out []string
	for p := range r.devices {
		if regexp.MustCompile(`^/dev/nvidia[0-9]+$`).MatchString(p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// probeOutput waits for the pod's probe to finish its report and returns it.
func probeOutput(t *testing.T, ns, pod string) probeReport {
	t.Helper()
	var out string
	eventually(t, 3*time.Minute, "pod "+pod+" runs and its container reports what it received", func(ctx context.Context) error {
		if err := podRunning(ns, pod)(ctx); err != nil {
			return err
		}
		var err error
		if out, err = lab.PodLog(state, realNode(t), ns, pod, "probe"); err != nil {
			return err
		}
		if !strings.Contains(out, "probe-report-done") {
			return fmt.Errorf("report not complete yet: %q", out)
		}
		return nil
	})
	return parseProbe(out)
}

func claimOf(ns, name, class string, capacity map[string]string, cel string) *resourcev1.ResourceClaim {
	req := resourcev1.ExactDeviceRequest{DeviceClassName: class}
	if len(capacity) > 0 {
		req.Capacity = &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{}}
		for k, v := range capacity {
			req.Capacity.Requests[resourcev1.QualifiedName(k)] = resource.MustParse(v)
		}
	}
	if cel != "" {
		req.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: cel}}}
	}
	return &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &req}},
		}},
	}
}

// cdiSpecsMentioning lists the CDI spec files of the node that name the claim's UID.
func cdiSpecsMentioning(t *testing.T, node, uid string) []string {
	t.Helper()
	dir := filepath.Join(lab.Layout{Root: state.Dir}.NodeDir(node), "cdi")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("read the node's CDI folder: %v", err)
	}
	var out []string
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil && strings.Contains(string(data), uid) {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestRealNodeContainersReceiveDevices: a whole GPU, a share and a MIG slice each reach a real
// container as gpudra prepared them; deleting the pod unprepares the claim and removes its spec.
func TestRealNodeContainersReceiveDevices(t *testing.T) {
	node := realNode(t)
	ns := namespace(t, "real-node")
	ctx := t.Context()
	claims := []*resourcev1.ResourceClaim{
		claimOf(ns, "whole", "gpu.gpudra.dev", nil, ""),
		claimOf(ns, "share", "gpu-share.gpudra.dev", map[string]string{"memory": "10Gi", "compute": "25"}, ""),
		claimOf(ns, "mig", "mig.gpudra.dev", nil, `device.attributes["gpu.gpudra.dev"].migProfile.startsWith("1g.")`),
	}
	for _, c := range claims {
		if _, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := lab.RealNodePod(ns, c.Name, node, []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(c.Name)}})
		if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	devices := publishedDevices(ctx, t)
	reports := map[string]probeReport{}
	uids := map[string]string{}
	for _, c := range claims {
		r := probeOutput(t, ns, c.Name)
		reports[c.Name] = r
		res, err := allocated(ctx, ns, c.Name)
		if err != nil || len(res) != 1 || res[0].Pool != node {
			t.Fatalf("claim %s: want one device of node %s, got %v (%v)", c.Name, node, res, err)
		}
		dev := devices[node+"/"+res[0].Device]
		t.Logf("claim %s got %s; the container reports:\n%s", c.Name, res[0].Device, r.raw)
		if got := r.env["GPUDRA_DEVICES"]; got != res[0].Device {
			t.Errorf("claim %s: GPUDRA_DEVICES=%q in the container, allocated %q", c.Name, got, res[0].Device)
		}
		// A whole GPU or share is named by its UUID; a MIG slice (made at prepare, so not
		// published with a UUID) by its parent's UUID and its GPU and compute instance.
		visible := r.env["NVIDIA_VISIBLE_DEVICES"]
		if parent := stringAttr(dev, "parentUUID"); parent != "" {
			if !regexp.MustCompile(`^MIG-` + regexp.QuoteMeta(parent) + `/[0-9]+/[0-9]+$`).MatchString(visible) {
				t.Errorf("claim %s: NVIDIA_VISIBLE_DEVICES=%q in the container, want the MIG device of GPU %s", c.Name, visible, parent)
			}
		} else if uuid := stringAttr(dev, "uuid"); uuid == "" || visible != uuid {
			t.Errorf("claim %s: NVIDIA_VISIBLE_DEVICES=%q in the container, the device's uuid is %q", c.Name, visible, uuid)
		}
		for _, ctl := range []string{"/dev/nvidiactl", "/dev/nvidia-uvm"} {
			if !strings.HasPrefix(r.devices[ctl], "char ") {
				t.Errorf("claim %s: the container has no %s (devices: %v)", c.Name, ctl, r.devices)
			}
		}
		// The device node is the allocated GPU (the MIG slice's parent), with NVIDIA's numbers
		// (the simulated GPUs' minors are their indexes).
		minor := stringAttr(dev, "parentIndex")
		if minor == "" {
			minor = stringAttr(dev, "index")
		}
		want := "/dev/nvidia" + minor
		if got := r.gpuNodes(); !slices.Equal(got, []string{want}) || r.devices[want] != "char 195:"+minor {
			t.Errorf("claim %s on %s: GPU device nodes %v (%s), want only %s char 195:%s", c.Name, res[0].Device, got, r.devices[want], want, minor)
		}
		got, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, c.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids[c.Name] = string(got.UID)
		if specs := cdiSpecsMentioning(t, node, uids[c.Name]); len(specs) == 0 {
			t.Errorf("claim %s is prepared but no CDI spec of node %s names it", c.Name, node)
		}
	}
	// The driver's user-space files, found by nvcdi in the node's driver root (the lab's
	// empty stand-ins), are mounted into every GPU container, as on a GPU node.
	for name, r := range reports {
		for _, want := range []string{"/libnvidia-ml.so.", "/libcuda.so.", "/usr/bin/nvidia-smi"} {
			if !slices.ContainsFunc(r.mounts, func(m string) bool { return strings.Contains(m, want) }) {
				t.Errorf("claim %s: no %s mount in the container; it reports mounts %v", name, want, r.mounts)
			}
		}
	}
	if r := reports["whole"]; r.env["GPUDRA_COMPUTE_PERCENT_0"] != "100" {
		t.Errorf("whole GPU: GPUDRA_COMPUTE_PERCENT_0=%q, want 100", r.env["GPUDRA_COMPUTE_PERCENT_0"])
	}
	if r := reports["share"]; r.env["GPUDRA_MEMORY_MIB_0"] != "10240" || r.env["GPUDRA_COMPUTE_PERCENT_0"] != "25" {
		t.Errorf("share of 10Gi and 25%%: the container got memory %q MiB, compute %q %%", r.env["GPUDRA_MEMORY_MIB_0"], r.env["GPUDRA_COMPUTE_PERCENT_0"])
	}
	var caps []string
	for p, what := range reports["mig"].devices {
		if strings.HasPrefix(p, "/dev/nvidia-caps/") && strings.HasPrefix(what, "char ") {
			caps = append(caps, p)
		}
	}
	if len(caps) != 2 {
		t.Errorf("MIG slice: want the GPU and compute instance capability devices, got %v", caps)
	}

	for _, c := range claims {
		if err := client.CoreV1().Pods(ns).Delete(ctx, c.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range claims {
		eventually(t, 2*time.Minute, "claim "+c.Name+" is unprepared: pod gone, claim released, CDI spec removed", func(ctx context.Context) error {
			if _, err := client.CoreV1().Pods(ns).Get(ctx, c.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("pod %s still there (%v)", c.Name, err)
			}
			got, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, c.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(got.Status.ReservedFor) > 0 {
				return fmt.Errorf("claim still reserved for %v", got.Status.ReservedFor)
			}
			if specs := cdiSpecsMentioning(t, node, uids[c.Name]); len(specs) > 0 {
				return fmt.Errorf("CDI specs still name the claim: %v", specs)
			}
			return nil
		})
	}
}

// TestRealNodeRestarts: a pod whose claim the kubelet is preparing while the plugin is down,
// or while the kubelet itself restarts, ends up running with its device.
func TestRealNodeRestarts(t *testing.T) {
	node := realNode(t)
	ns := namespace(t, "real-node-restart")
	ctx := t.Context()
	run := func(name string, during func()) {
		t.Helper()
		c := claimOf(ns, name, "gpu.gpudra.dev", nil, "")
		if _, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := lab.RealNodePod(ns, name, node, []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(name)}})
		if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		during()
		r := probeOutput(t, ns, name)
		if len(r.gpuNodes()) != 1 || r.env["GPUDRA_DEVICES"] == "" {
			t.Errorf("pod %s: want one GPU prepared after the restart, the container reports:\n%s", name, r.raw)
		}
	}

	// Plugin down: the kubelet cannot prepare, the pod waits; the plugin comes back, the pod runs.
	plugin := lab.PluginComponent(node)
	if err := lab.StopComponent(state, plugin); err != nil {
		t.Fatal(err)
	}
	run("plugin-down", func() {
		eventually(t, time.Minute, "the pod is bound to the real node and waits for its claim", func(ctx context.Context) error {
			p, err := client.CoreV1().Pods(ns).Get(ctx, "plugin-down", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Spec.NodeName != node {
				return fmt.Errorf("not bound yet%s", schedulingMessage(p))
			}
			if p.Status.Phase == corev1.PodRunning {
				return fmt.Errorf("pod runs although its plugin is down")
			}
			return nil
		})
		time.Sleep(3 * time.Second) // the kubelet tries (and fails) to prepare meanwhile
		if _, err := lab.StartComponent(state, plugin); err != nil {
			t.Fatal(err)
		}
	})

	// Kubelet restart right after the pod is bound.
	run("kubelet-restart", func() {
		eventually(t, time.Minute, "the pod is bound to the real node", func(ctx context.Context) error {
			p, err := client.CoreV1().Pods(ns).Get(ctx, "kubelet-restart", metav1.GetOptions{})
			if err == nil && p.Spec.NodeName != node {
				err = fmt.Errorf("not bound yet%s", schedulingMessage(p))
			}
			return err
		})
		if _, err := lab.RestartComponent(state, lab.KubeletComponent(node)); err != nil {
			t.Fatal(err)
		}
	})
	// A starting kubelet deletes its node's ResourceSlices (no plugin has registered yet);
	// the plugin's slice controller publishes them again after its sync delay.
	eventually(t, 2*time.Minute, "node "+node+" publishes its ResourceSlices again after the kubelet restart", func(ctx context.Context) error {
		return lab.PoolPublished(ctx, client, node)
	})
}

// TestRealNodeRollingUpdate: as in a DaemonSet rolling update, a second plugin registers beside
// the first; with the first stopped the kubelet prepares through the second, and the first,
// back again, unprepares what the second prepared (they share the checkpoint and CDI specs).
func TestRealNodeRollingUpdate(t *testing.T) {
	node := realNode(t)
	ns := namespace(t, "real-node-rolling")
	ctx := t.Context()
	name := lab.PluginComponent(node)
	old := state.Component(name)
	if old == nil {
		t.Fatalf("the lab has no component %s", name)
	}
	newUID := string(uuid.NewUUID())
	argv := slices.Clone(old.Argv)
	for i, a := range argv {
		switch {
		case strings.HasPrefix(a, "--rolling-update-pod-uid="):
			argv[i] = "--rolling-update-pod-uid=" + newUID
		case strings.HasPrefix(a, "--metrics-bind-address="):
			argv[i] = "--metrics-bind-address=127.0.0.1:0"
		}
	}
	if !slices.Contains(argv, "--rolling-update-pod-uid="+newUID) {
		t.Fatalf("the real node's plugin runs without --rolling-update-pod-uid: %v", old.Argv)
	}
	logPath := filepath.Join(t.TempDir(), "second-plugin.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	second := exec.Command(argv[0], argv[1:]...)
	second.Stdout, second.Stderr = logFile, logFile
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	stopSecond := func() {
		if second.ProcessState == nil {
			_ = second.Process.Signal(syscall.SIGTERM)
			_ = second.Wait()
		}
	}
	t.Cleanup(func() {
		stopSecond()
		if c := state.Component(name); c != nil {
			if gone, _ := lab.Exited(*c); gone {
				if _, err := lab.StartComponent(state, name); err != nil {
					t.Errorf("restart %s: %v", name, err)
				}
			}
		}
		if t.Failed() {
			data, _ := os.ReadFile(logPath)
			t.Logf("second plugin's log:\n%s", data)
		}
	})
	// The kubelet logs when it connects to a plugin's DRA socket, which carries the pod UID.
	connected := func(uid string, since int) func(context.Context) error {
		return func(context.Context) error {
			data, err := os.ReadFile(state.KubeletLog(node))
			if err != nil {
				return err
			}
			for _, line := range strings.Split(string(data[min(since, len(data)):]), "\n") {
				if strings.Contains(line, `"Connection changed"`) && strings.Contains(line, "dra-"+uid+".sock") && strings.Contains(line, "connected=true") {
					return nil
				}
			}
			return fmt.Errorf("the kubelet has not connected to the plugin with pod UID %s yet", uid)
		}
	}
	eventually(t, time.Minute, "the kubelet connects to the second plugin beside the first", connected(newUID, 0))
	if err := lab.StopComponent(state, name); err != nil {
		t.Fatal(err)
	}

	claim := claimOf(ns, "handover", "gpu.gpudra.dev", nil, "")
	created, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := lab.RealNodePod(ns, "handover", node, []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("handover")}})
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := probeOutput(t, ns, "handover"); len(r.gpuNodes()) != 1 {
		t.Fatalf("with only the second plugin running, the container got GPU device nodes %v", r.gpuNodes())
	}
	if data, _ := os.ReadFile(logPath); !strings.Contains(string(data), string(created.UID)) {
		t.Errorf("the second plugin's log does not mention claim %s: it did not prepare it", created.UID)
	}

	// The first plugin comes back, the second goes: the first unprepares the claim.
	logSoFar, _ := os.ReadFile(state.KubeletLog(node))
	before := len(logSoFar)
	restarted, err := lab.StartComponent(state, name)
	if err != nil {
		t.Fatal(err)
	}
	uidFlag := ""
	for _, a := range restarted.Argv {
		if v, ok := strings.CutPrefix(a, "--rolling-update-pod-uid="); ok {
			uidFlag = v
		}
	}
	eventually(t, time.Minute, "the kubelet connects to the first plugin again", connected(uidFlag, before))
	stopSecond()
	if err := client.CoreV1().Pods(ns).Delete(ctx, "handover", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the first plugin unprepares the claim the second prepared", func(ctx context.Context) error {
		if specs := cdiSpecsMentioning(t, node, string(created.UID)); len(specs) > 0 {
			return fmt.Errorf("CDI specs still name the claim: %v", specs)
		}
		got, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, "handover", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(got.Status.ReservedFor) > 0 {
			return fmt.Errorf("claim still reserved for %v", got.Status.ReservedFor)
		}
		return nil
	})
}

// TestRealNodeBadConfigShowsInPodEvents: a config the webhook cannot judge (an MPS pinned
// memory limit above the allocated GPU's memory) is refused at prepare, and the pod's events
// name the field, as the kubelet reports the plugin's error.
func TestRealNodeBadConfigShowsInPodEvents(t *testing.T) {
	node := realNode(t)
	ns := namespace(t, "real-node-bad-config")
	ctx := t.Context()
	c := claimOf(ns, "too-much-pinned", "gpu.gpudra.dev", nil, "")
	c.Spec.Devices.Config = []resourcev1.DeviceClaimConfiguration{{
		Requests: []string{"gpu"},
		DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
			Driver: lab.DriverName,
			Parameters: runtimeRaw(`{"apiVersion": "gpu.gpudra.dev/v1alpha1", "kind": "GpuConfig",
				"sharing": {"strategy": "MPS", "mps": {"defaultPinnedDeviceMemoryLimit": "4Ti"}}}`),
		}},
	}}
	if _, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, c, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the webhook should let this config through (it cannot know the GPU): %v", err)
	}
	pod := lab.RealNodePod(ns, "bad-config", node, []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(c.Name)}})
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the pod's events name the config field the plugin refused", func(ctx context.Context) error {
		events, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=bad-config"})
		if err != nil {
			return err
		}
		var seen []string
		for _, e := range events.Items {
			if strings.Contains(e.Message, "defaultPinnedDeviceMemoryLimit") && strings.Contains(e.Message, "exceeds the device's memory") {
				return nil
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return fmt.Errorf("no event names the field yet: %v", seen)
	})
	if p, err := client.CoreV1().Pods(ns).Get(ctx, "bad-config", metav1.GetOptions{}); err == nil && p.Status.Phase == corev1.PodRunning {
		t.Errorf("the pod runs although its config was refused at prepare")
	}
}

// TestRealNodeRunsTheGpudraImage: the gpudra image the lab builds (the Helm chart's default
// image name; binaries with the C libraries they load) runs in a real container: its CLI
// renders a simulated node there.
func TestRealNodeRunsTheGpudraImage(t *testing.T) {
	node := realNode(t)
	ns := namespace(t, "real-node-image")
	pod := lab.RealNodePod(ns, "inspect", node, nil)
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	pod.Spec.Containers[0].Name = "gpudra"
	pod.Spec.Containers[0].Image = lab.GpudraImage
	pod.Spec.Containers[0].Command = []string{"gpudra", "inspect", "--nvml=sim:l40s-pcie", "--node-name=in-a-container"}
	if _, err := client.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var out string
	eventually(t, 2*time.Minute, "gpudra inspect runs to completion in the gpudra image", func(ctx context.Context) error {
		p, err := client.CoreV1().Pods(ns).Get(ctx, "inspect", metav1.GetOptions{})
		if err != nil {
			return err
		}
		out, _ = lab.PodLog(state, node, ns, "inspect", "gpudra")
		switch p.Status.Phase {
		case corev1.PodSucceeded:
			return nil
		case corev1.PodFailed:
			t.Fatalf("gpudra inspect failed in the image:\n%s", out)
		}
		return fmt.Errorf("pod is %s%s", p.Status.Phase, schedulingMessage(p))
	})
	for _, want := range []string{"L40S", "in-a-container"} {
		if !strings.Contains(out, want) {
			t.Errorf("gpudra inspect in the image did not print %q:\n%s", want, out)
		}
	}
}

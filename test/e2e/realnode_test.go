//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/kubeletplugin/mps"
	"github.com/gpudra/gpudra/lab"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// Tests on the lab's real node: a kubelet with containerd and runc that calls
// gpudra-kubelet-plugin to prepare claims and starts real containers with the CDI devices.

// realNode returns the lab's real node, or ends the test (labLacks) saying why there is none:
// the lab file has none, or this machine cannot run containers (not root, no cgroups,
// overlayfs or device files; lab.CheckRealNodeHost).
func realNode(t *testing.T) string {
	t.Helper()
	node, err := state.RealNodeAvailable()
	if err != nil {
		labLacks(t, "no real node: %v", err)
	}
	return node
}

// probeReport is what the probe container printed: device nodes, environment, extra mounts.
type probeReport struct {
	devices map[string]string // path → "char 195:3"
	env     map[string]string
	mounts  []string
	files   map[string]bool   // files the probe looked for and found
	links   map[string]string // symlink → target in the library folders
	shm     string            // the root of /dev/shm's mount and its mode: "<root> <mode>"
	preload string            // what /etc/ld.so.preload lists ("" without one)
	raw     string
}

func parseProbe(out string) probeReport {
	r := probeReport{devices: map[string]string{}, env: map[string]string{}, files: map[string]bool{}, links: map[string]string{}, raw: out}
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
		case "preload":
			r.preload = rest
		case "file":
			path, _, _ := strings.Cut(rest, " ")
			r.files[path] = true
		case "link":
			link, target, _ := strings.Cut(rest, " -> ")
			r.links[link] = target
		case "shm":
			r.shm = rest
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

// probeOutput waits for the pod's probe on the real node to finish its report and returns it.
func probeOutput(t *testing.T, ns, pod string) probeReport {
	t.Helper()
	return probeOutputOn(t, realNode(t), ns, pod)
}

// probeOutputOn is probeOutput for a pod on the given real node.
func probeOutputOn(t *testing.T, node, ns, pod string) probeReport {
	t.Helper()
	var out string
	eventually(t, 3*time.Minute, "pod "+pod+" runs and its container reports what it received", func(ctx context.Context) error {
		if err := podRunning(ns, pod)(ctx); err != nil {
			return err
		}
		var err error
		if out, err = lab.PodLog(state, node, ns, pod, "probe"); err != nil {
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

// withConfig gives the claim's request "gpu" (claimOf's) a gpudra opaque config.
func withConfig(c *resourcev1.ResourceClaim, params string) *resourcev1.ResourceClaim {
	c.Spec.Devices.Config = []resourcev1.DeviceClaimConfiguration{{
		Requests: []string{"gpu"},
		DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
			Driver: api.DriverName, Parameters: runtimeRaw(params),
		}},
	}}
	return c
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
	inLane(t, realNodeLane)
	node := realNode(t)
	ns := namespace(t, "real-node")
	ctx := t.Context()
	claims := []*resourcev1.ResourceClaim{
		claimOf(ns, "whole", "gpu.gpudra.dev", nil, ""),
		claimOf(ns, "share", "gpu-share.gpudra.dev", map[string]string{"memory": "10Gi", "compute": "25"}, ""),
		claimOf(ns, "mig", "mig.gpudra.dev", nil, `device.attributes["gpu.gpudra.dev"].migProfile.startsWith("1g.")`),
		claimOf(ns, "mps", "gpu-share.gpudra.dev", map[string]string{"memory": "8Gi", "compute": "20"}, ""),
	}
	// The "mps" share runs under its own MPS control daemon (simulated on this node).
	withConfig(claims[3], `{"apiVersion": "gpu.gpudra.dev/v1alpha1", "kind": "GpuConfig", "sharing": {"strategy": "MPS"}}`)
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
		// The probe image says NVIDIA_VISIBLE_DEVICES=all, as CUDA images do; the CDI spec
		// makes it void, so that NVIDIA's container runtime does not inject devices again.
		if got := r.env["NVIDIA_VISIBLE_DEVICES"]; got != "void" {
			t.Errorf("claim %s: NVIDIA_VISIBLE_DEVICES=%q in the container, want void (NVIDIA's runtime would inject the devices again)", c.Name, got)
		}
		// A whole GPU or share is named by its UUID; a MIG slice (made at prepare, so not
		// published with a UUID) by its parent's UUID and its GPU and compute instance.
		visible := r.env["GPUDRA_VISIBLE_DEVICES"]
		if parent := stringAttr(dev, "parentUUID"); parent != "" {
			if !regexp.MustCompile(`^MIG-` + regexp.QuoteMeta(parent) + `/[0-9]+/[0-9]+$`).MatchString(visible) {
				t.Errorf("claim %s: GPUDRA_VISIBLE_DEVICES=%q in the container, want the MIG device of GPU %s", c.Name, visible, parent)
			}
		} else if uuid := stringAttr(dev, "uuid"); uuid == "" || visible != uuid {
			t.Errorf("claim %s: GPUDRA_VISIBLE_DEVICES=%q in the container, the device's uuid is %q", c.Name, visible, uuid)
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
	// The specs' hooks (nvidia-cdi-hook, built by the lab's toolchain) ran in each container:
	// the linker cache exists and libcuda.so points at libcuda.so.1, as on a GPU node.
	for name, r := range reports {
		if !r.files["/etc/ld.so.cache"] {
			t.Errorf("claim %s: no /etc/ld.so.cache in the container: the update-ldcache hook did not run", name)
		}
		if !slices.ContainsFunc(slices.Collect(maps.Keys(r.links)), func(l string) bool {
			return strings.HasSuffix(l, "/libcuda.so") && r.links[l] == "libcuda.so.1"
		}) {
			t.Errorf("claim %s: no libcuda.so -> libcuda.so.1 link in the container (links %v): the create-symlinks hook did not run", name, r.links)
		}
	}
	if r := reports["whole"]; r.env["GPUDRA_COMPUTE_PERCENT_0"] != "100" {
		t.Errorf("whole GPU: GPUDRA_COMPUTE_PERCENT_0=%q, want 100", r.env["GPUDRA_COMPUTE_PERCENT_0"])
	}
	if r := reports["share"]; r.env["GPUDRA_MEMORY_MIB_0"] != "10240" || r.env["GPUDRA_COMPUTE_PERCENT_0"] != "25" {
		t.Errorf("share of 10Gi and 25%%: the container got memory %q MiB, compute %q %%", r.env["GPUDRA_MEMORY_MIB_0"], r.env["GPUDRA_COMPUTE_PERCENT_0"])
	}
	// MPS: the container talks to the claim's daemon through the claim's pipe directory
	// (where the simulated daemon's file is) and shares the claim's shm directory as its
	// /dev/shm (a plain 1777 directory: the lab's plugin may not mount a tmpfs).
	if r := reports["mps"]; r.env["CUDA_MPS_PIPE_DIRECTORY"] != "/tmp/nvidia-mps" || !slices.Contains(r.mounts, "/tmp/nvidia-mps") || !slices.Contains(r.mounts, "/var/log/nvidia-mps") {
		t.Errorf("MPS share: CUDA_MPS_PIPE_DIRECTORY=%q, mounts %v: want the claim's pipe and log directories", r.env["CUDA_MPS_PIPE_DIRECTORY"], r.mounts)
	} else if !r.files["/tmp/nvidia-mps/"+mps.SimulatedFile] {
		t.Errorf("MPS share: the claim's daemon is not in the container's pipe directory (files %v)", r.files)
	}
	if root, mode, _ := strings.Cut(reports["mps"].shm, " "); !strings.HasSuffix(root, "/mps/"+uids["mps"]+"/shm") || mode != "sticky-777" {
		t.Errorf("MPS share: /dev/shm is %q (mode %s), want the claim's shm directory .../mps/%s/shm, 1777", root, mode, uids["mps"])
	}
	// The plain share is enforced with MPS limits too (no libvgpu.so on this node): its own
	// daemon and shm directory, not the other claim's. Claims without MPS keep the pod's.
	if root, _, _ := strings.Cut(reports["share"].shm, " "); !strings.HasSuffix(root, "/mps/"+uids["share"]+"/shm") {
		t.Errorf("share under MPS limits: /dev/shm is %q, want its own shm directory .../mps/%s/shm", root, uids["share"])
	}
	for _, other := range []string{"whole", "mig"} {
		if root, _, _ := strings.Cut(reports[other].shm, " "); strings.Contains(root, "/mps/") {
			t.Errorf("claim %s (no MPS): /dev/shm is an MPS directory %q", other, root)
		}
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
	inLane(t, realNodeLane)
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
	resume := stopRealNodePlugin(t, node)
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
		resume()
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

// TestRealNodeRollingUpdate rolls the chart's plugin DaemonSet on the real node: the new
// plugin pod starts beside the old one (maxSurge 1, maxUnavailable 0) and is ready before the
// old one is deleted, the kubelet switches to its socket, and it both prepares new claims and
// unprepares the claim the old pod prepared (they share the checkpoint and CDI specs).
func TestRealNodeRollingUpdate(t *testing.T) {
	inLane(t, realNodeLane)
	node := realNode(t)
	dsNS, dsName, ok := state.RealNodePluginDaemonSet(node)
	if !ok {
		labLacks(t, "the lab runs the real node's plugin as a process (install: processes); rolling updates are the chart DaemonSet's")
	}
	ns := namespace(t, "real-node-rolling")
	ctx := t.Context()
	old := realNodePluginPod(t, node)
	before := claimedRealNodePod(t, ns, "before", node)
	if r := probeOutput(t, ns, "before"); len(r.gpuNodes()) != 1 {
		t.Fatalf("before the update, the container got GPU device nodes %v", r.gpuNodes())
	}

	w, err := client.CoreV1().Pods(dsNS).Watch(ctx, metav1.ListOptions{LabelSelector: realNodePluginSelector, FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	logSoFar, _ := os.ReadFile(state.KubeletLog(node))
	// What `kubectl rollout restart` (or a helm upgrade that changes the pod template) does.
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"lab.gpudra.dev/restarted-at":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
	if _, err := client.AppsV1().DaemonSets(dsNS).Patch(ctx, dsName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The watch delivers the node's plugin pods' changes in order: the new pod must be Ready
	// before the old one is asked to go.
	var newPod *corev1.Pod
	oldGoing := false
	deadline := time.After(3 * time.Minute)
	for newPod == nil || !oldGoing {
		select {
		case ev, open := <-w.ResultChan():
			if !open {
				t.Fatal("pod watch closed during the rolling update")
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if !isPod {
				continue
			}
			switch {
			case p.UID == old.UID && (p.DeletionTimestamp != nil || ev.Type == watch.Deleted):
				if newPod == nil {
					t.Fatalf("the old plugin pod %s is deleted before a new one is ready: the node is left without its plugin", old.Name)
				}
				oldGoing = true
			case p.UID != old.UID && newPod == nil && podIsReady(p):
				newPod = p
			}
		case <-deadline:
			t.Fatalf("rolling update not done after 3m: new pod ready %v, old pod deleted %v; plugin pods: %s", newPod != nil, oldGoing, describeRealNodePluginPods(t, node))
		}
	}
	eventually(t, time.Minute, "the kubelet connects to the new plugin's socket", kubeletConnected(node, string(newPod.UID), len(logSoFar)))
	eventually(t, 2*time.Minute, "the old plugin pod is gone", func(ctx context.Context) error {
		_, err := client.CoreV1().Pods(dsNS).Get(ctx, old.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("pod %s still there (%v)", old.Name, err)
	})

	// The new plugin prepares a new claim ...
	after := claimedRealNodePod(t, ns, "after", node)
	if r := probeOutput(t, ns, "after"); len(r.gpuNodes()) != 1 {
		t.Fatalf("after the update, the container got GPU device nodes %v", r.gpuNodes())
	}
	// ... and unprepares the one the old plugin prepared.
	if err := client.CoreV1().Pods(ns).Delete(ctx, "before", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the new plugin unprepares the claim the old one prepared", func(ctx context.Context) error {
		if specs := cdiSpecsMentioning(t, node, string(before.UID)); len(specs) > 0 {
			return fmt.Errorf("CDI specs still name the claim: %v", specs)
		}
		got, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, "before", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(got.Status.ReservedFor) > 0 {
			return fmt.Errorf("claim still reserved for %v", got.Status.ReservedFor)
		}
		return nil
	})
	logText, err := lab.PodLog(state, node, dsNS, newPod.Name, "plugin")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*resourcev1.ResourceClaim{before, after} {
		if !strings.Contains(logText, string(c.UID)) {
			t.Errorf("the new plugin's log does not mention claim %s (%s): it did not handle it:\n%s", c.Name, c.UID, logText)
		}
	}
}

// TestRealNodeContainerWithTwoClaims: one container given two claims — one the user named,
// one made from the pod's template — gets both claims' GPUs, and each claim's own variables
// (GPUDRA_CLAIM_<name>_*, named after the pod's name for a template's claim) say what each
// claim got; the claim-wide GPUDRA_VISIBLE_DEVICES is one claim's.
func TestRealNodeContainerWithTwoClaims(t *testing.T) {
	inLane(t, realNodeLane)
	node := realNode(t)
	ns := namespace(t, "real-node-two-claims")
	ctx := t.Context()
	if _, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, claimOf(ns, "train", "gpu.gpudra.dev", nil, ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	share := claimOf(ns, "", "gpu-share.gpudra.dev", map[string]string{"memory": "10Gi", "compute": "25"}, "")
	tmpl := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "eval-share"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: share.Spec}}
	if _, err := client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := lab.RealNodePod(ns, "both", node, []corev1.PodResourceClaim{
		{Name: "train", ResourceClaimName: ptr.To("train")},
		{Name: "eval", ResourceClaimTemplateName: ptr.To("eval-share")},
	})
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := probeOutput(t, ns, "both")
	got, err := client.CoreV1().Pods(ns).Get(ctx, "both", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	evalClaim := ""
	for _, st := range got.Status.ResourceClaimStatuses {
		if st.Name == "eval" && st.ResourceClaimName != nil {
			evalClaim = *st.ResourceClaimName
		}
	}
	devices := publishedDevices(ctx, t)
	var visible []string
	for _, c := range []struct{ claim, envName string }{{"train", "TRAIN"}, {evalClaim, "EVAL"}} {
		res, err := allocated(ctx, ns, c.claim)
		if err != nil || len(res) != 1 {
			t.Fatalf("claim %q: %v (%v)", c.claim, res, err)
		}
		uuid := stringAttr(devices[node+"/"+res[0].Device], "uuid")
		prefix := "GPUDRA_CLAIM_" + c.envName + "_"
		if r.env[prefix+"DEVICES"] != res[0].Device || r.env[prefix+"VISIBLE_DEVICES"] != uuid {
			t.Errorf("claim %s got %s (%s); the container has %sDEVICES=%q, %sVISIBLE_DEVICES=%q",
				c.claim, res[0].Device, uuid, prefix, r.env[prefix+"DEVICES"], prefix, r.env[prefix+"VISIBLE_DEVICES"])
		}
		visible = append(visible, uuid)
	}
	if want := "10240"; r.env["GPUDRA_CLAIM_EVAL_MEMORY_MIB"] != want || r.env["GPUDRA_CLAIM_EVAL_COMPUTE_PERCENT"] != "25" {
		t.Errorf("the share's own memory and compute: %q MiB, %q %%; want %s, 25", r.env["GPUDRA_CLAIM_EVAL_MEMORY_MIB"], r.env["GPUDRA_CLAIM_EVAL_COMPUTE_PERCENT"], want)
	}
	if !slices.Contains(visible, r.env["GPUDRA_VISIBLE_DEVICES"]) {
		t.Errorf("GPUDRA_VISIBLE_DEVICES=%q, want one claim's (%v)", r.env["GPUDRA_VISIBLE_DEVICES"], visible)
	}
	if nodes := r.gpuNodes(); len(nodes) != 2 {
		t.Errorf("the container has GPU device nodes %v, want both claims' GPUs\n%s", nodes, r.raw)
	}
}

// TestRealNodeMPSDaemonOutlivesItsPlugin: with the chart, an MPS claim's control daemon runs
// in a pod of its own on the claim's node (gpudra-mps-<claim UID>), which the claim's
// container talks to through its pipe directory. The plugin's pod is deleted and made again
// (a crash, an eviction, an upgrade): the daemon's pod is the same one, never restarted, and
// the claim stays prepared. Deleting the claim's pod deletes the daemon's pod and directories.
func TestRealNodeMPSDaemonOutlivesItsPlugin(t *testing.T) {
	inLane(t, realNodeLane)
	node := realNode(t)
	dsNS, _, ok := state.RealNodePluginDaemonSet(node)
	if !ok {
		labLacks(t, "the lab runs the real node's plugin as a process (install: processes); its MPS daemons are the plugin's children")
	}
	ns := namespace(t, "real-node-mps-daemon")
	ctx := t.Context()
	claim := withConfig(claimOf(ns, "mps", "gpu.gpudra.dev", nil, ""),
		`{"apiVersion": "gpu.gpudra.dev/v1alpha1", "kind": "GpuConfig", "sharing": {"strategy": "MPS", "mps": {"defaultActiveThreadPercentage": 40}}}`)
	created, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := lab.RealNodePod(ns, "mps", node, []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("mps")}})
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := probeOutput(t, ns, "mps")
	if !r.files["/tmp/nvidia-mps/"+mps.SimulatedFile] {
		t.Fatalf("the claim's container does not see its daemon in its pipe directory (files %v)", r.files)
	}

	name := mps.PodPrefix + string(created.UID)
	daemonPod := func(ctx context.Context) (*corev1.Pod, error) {
		pods, err := client.CoreV1().Pods(dsNS).List(ctx, metav1.ListOptions{LabelSelector: api.LabelMPSClaimUID + "=" + string(created.UID)})
		if err != nil {
			return nil, err
		}
		if len(pods.Items) != 1 {
			return nil, fmt.Errorf("%d daemon pods of the claim", len(pods.Items))
		}
		return &pods.Items[0], nil
	}
	dep, err := client.AppsV1().Deployments(dsNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the claim's MPS control daemon Deployment: %v", err)
	}
	first, err := daemonPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if first.Spec.NodeName != node || !podIsReady(first) {
		t.Fatalf("daemon pod %s on %q, ready %v: want it ready on %s", first.Name, first.Spec.NodeName, podIsReady(first), node)
	}
	pipe := dep.Annotations[api.AnnotationMPSPipeDir]
	raw, err := os.ReadFile(filepath.Join(pipe, mps.SimulatedFile))
	if err != nil || !strings.Contains(string(raw), `"activeThreadPercent":40`) {
		t.Fatalf("the daemon's state in %s: %s (%v), want the claim's active thread percentage 40", pipe, raw, err)
	}

	// The plugin's pod goes; the DaemonSet makes a new one.
	old := realNodePluginPod(t, node)
	if err := client.CoreV1().Pods(dsNS).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "a new plugin pod is ready on "+node, func(ctx context.Context) error {
		if p := realNodePluginPodNow(ctx, node); p == nil || p.UID == old.UID {
			return fmt.Errorf("plugin pods: %s", describeRealNodePluginPods(t, node))
		}
		return nil
	})
	now, err := daemonPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	restarts := int32(0)
	for _, c := range now.Status.ContainerStatuses {
		restarts += c.RestartCount
	}
	if now.UID != first.UID || restarts > 0 || !podIsReady(now) {
		t.Errorf("after the plugin's pod was replaced: daemon pod %s (uid %s, was %s), %d restarts, ready %v; want the same pod, never restarted",
			now.Name, now.UID, first.UID, restarts, podIsReady(now))
	}
	if err := podRunning(ns, "mps")(ctx); err != nil {
		t.Errorf("the claim's pod: %v", err)
	}
	if _, err := os.Stat(filepath.Join(pipe, mps.SimulatedFile)); err != nil {
		t.Errorf("the daemon is gone from the claim's pipe directory: %v", err)
	}

	// The claim's pod goes: the new plugin unprepares the claim, and its daemon goes.
	if err := client.CoreV1().Pods(ns).Delete(ctx, "mps", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the claim's MPS control daemon and its directories are gone", func(ctx context.Context) error {
		if _, err := client.AppsV1().Deployments(dsNS).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("Deployment %s still there (%v)", name, err)
		}
		if p, err := daemonPod(ctx); p != nil || !strings.HasPrefix(fmt.Sprint(err), "0 daemon pods") {
			return fmt.Errorf("daemon pod: %v", err)
		}
		if _, err := os.Stat(pipe); !os.IsNotExist(err) {
			return fmt.Errorf("pipe directory %s still there (%v)", pipe, err)
		}
		return nil
	})
}

// realNodePluginSelector selects the chart's plugin pods.
var realNodePluginSelector = lab.ChartPodSelector("kubelet-plugin")

// realNodePluginPod is the one running, ready plugin pod of the chart on the node.
func realNodePluginPod(t *testing.T, node string) *corev1.Pod {
	t.Helper()
	var found *corev1.Pod
	eventually(t, 2*time.Minute, "one ready plugin pod on node "+node, func(ctx context.Context) error {
		if found = realNodePluginPodNow(ctx, node); found == nil {
			return fmt.Errorf("plugin pods: %s", describeRealNodePluginPods(t, node))
		}
		return nil
	})
	return found
}

// realNodePluginPodNow is the node's one plugin pod if it is ready and not going, else nil.
func realNodePluginPodNow(ctx context.Context, node string) *corev1.Pod {
	dsNS, _, _ := state.RealNodePluginDaemonSet(node)
	pods, err := client.CoreV1().Pods(dsNS).List(ctx, metav1.ListOptions{LabelSelector: realNodePluginSelector, FieldSelector: "spec.nodeName=" + node})
	if err != nil || len(pods.Items) != 1 || !podIsReady(&pods.Items[0]) || pods.Items[0].DeletionTimestamp != nil {
		return nil
	}
	return &pods.Items[0]
}

func describeRealNodePluginPods(t *testing.T, node string) string {
	dsNS, _, _ := state.RealNodePluginDaemonSet(node)
	pods, err := client.CoreV1().Pods(dsNS).List(t.Context(), metav1.ListOptions{LabelSelector: realNodePluginSelector, FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, p := range pods.Items {
		out = append(out, fmt.Sprintf("%s (uid %s, %s, ready %v, deleting %v)", p.Name, p.UID, p.Status.Phase, podIsReady(&p), p.DeletionTimestamp != nil))
	}
	return fmt.Sprintf("%d: %s", len(out), strings.Join(out, "; "))
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// stopRealNodePlugin takes the real node's plugin away and returns what brings it back. With
// the chart, as an operator would: the DaemonSet stops selecting the node (its pod is deleted)
// and selects it again; else the lab's plugin process is stopped and started.
func stopRealNodePlugin(t *testing.T, node string) (resume func()) {
	t.Helper()
	ctx := t.Context()
	dsNS, dsName, ok := state.RealNodePluginDaemonSet(node)
	if !ok {
		plugin := lab.PluginComponent(node)
		if err := lab.StopComponent(state, plugin); err != nil {
			t.Fatal(err)
		}
		return func() {
			if _, err := lab.StartComponent(state, plugin); err != nil {
				t.Fatal(err)
			}
		}
	}
	selector := func(value string) {
		t.Helper()
		patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"nodeSelector":{"lab.gpudra.dev/plugin-paused":%s}}}}}`, value)
		if _, err := client.AppsV1().DaemonSets(dsNS).Patch(ctx, dsName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	selector(`"true"`)
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			selector("null")
		}
	})
	eventually(t, 2*time.Minute, "the real node's plugin pod is gone", func(ctx context.Context) error {
		pods, err := client.CoreV1().Pods(dsNS).List(ctx, metav1.ListOptions{LabelSelector: realNodePluginSelector, FieldSelector: "spec.nodeName=" + node})
		if err == nil && len(pods.Items) > 0 {
			err = fmt.Errorf("plugin pods: %s", describeRealNodePluginPods(t, node))
		}
		return err
	})
	return func() {
		selector("null")
		resumed = true
		realNodePluginPod(t, node)
	}
}

// claimedRealNodePod creates a claim for one whole GPU and a probe pod on the real node using it.
func claimedRealNodePod(t *testing.T, ns, name, node string) *resourcev1.ResourceClaim {
	t.Helper()
	created, err := client.ResourceV1().ResourceClaims(ns).Create(t.Context(), claimOf(ns, name, "gpu.gpudra.dev", nil, ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := lab.RealNodePod(ns, name, node, []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(name)}})
	if _, err := client.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return created
}

// kubeletConnected checks the kubelet's log, from offset since, for its connection to the DRA
// socket of the plugin pod with that UID.
func kubeletConnected(node, uid string, since int) func(context.Context) error {
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

// TestRealNodeBadConfigShowsInPodEvents: a config the webhook cannot judge (an MPS pinned
// memory limit above the allocated GPU's memory) is refused at prepare, and the pod's events
// name the field, as the kubelet reports the plugin's error.
func TestRealNodeBadConfigShowsInPodEvents(t *testing.T) {
	inLane(t, realNodeLane)
	node := realNode(t)
	ns := namespace(t, "real-node-bad-config")
	ctx := t.Context()
	c := withConfig(claimOf(ns, "too-much-pinned", "gpu.gpudra.dev", nil, ""), `{"apiVersion": "gpu.gpudra.dev/v1alpha1", "kind": "GpuConfig",
		"sharing": {"strategy": "MPS", "mps": {"defaultPinnedDeviceMemoryLimit": "4Ti"}}}`)
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

// TestRealNodeRunsThePluginImage: the kubelet plugin's image the lab builds as a release does
// (the Helm chart's image name; the binary with the C libraries it loads) runs in a real
// container: the plugin starts there and reports the version it was built with.
func TestRealNodeRunsThePluginImage(t *testing.T) {
	inLane(t, realNodeLane)
	node := realNode(t)
	ns := namespace(t, "real-node-image")
	pod := lab.RealNodePod(ns, "version", node, nil)
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	pod.Spec.Containers[0].Name = "plugin"
	if state.PluginImage == "" {
		t.Fatal("the lab's state names no plugin image")
	}
	pod.Spec.Containers[0].Image = state.PluginImage
	pod.Spec.Containers[0].Command = []string{"gpudra-kubelet-plugin", "--version"}
	if _, err := client.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var out string
	eventually(t, 2*time.Minute, "gpudra-kubelet-plugin --version runs to completion in its image", func(ctx context.Context) error {
		p, err := client.CoreV1().Pods(ns).Get(ctx, "version", metav1.GetOptions{})
		if err != nil {
			return err
		}
		out, _ = lab.PodLog(state, node, ns, "version", "plugin")
		switch p.Status.Phase {
		case corev1.PodSucceeded:
			return nil
		case corev1.PodFailed:
			t.Fatalf("gpudra-kubelet-plugin --version failed in the image:\n%s", out)
		}
		return fmt.Errorf("pod is %s%s", p.Status.Phase, schedulingMessage(p))
	})
	if want := "gpudra-kubelet-plugin v" + state.PluginImage[strings.LastIndex(state.PluginImage, ":")+1:] + " "; !strings.HasPrefix(out, want) {
		t.Errorf("gpudra-kubelet-plugin --version in the image printed %q, want it to start with %q", out, want)
	}
}

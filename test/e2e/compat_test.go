//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/lab"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// Pods and manifests written for NVIDIA's device plugin and DRA driver, run on gpudra.

// TestRealNodeRunsPodsWrittenForTheDevicePlugin: a pod that asks for nvidia.com/gpu: 1 and the
// GPU Operator's MIG example (a Deployment whose replicas each ask for one
// nvidia.com/mig-<profile>) run unchanged on the real node, with as many replicas as the
// node has room for. kube-scheduler makes each pod a claim of the class that serves the
// resource, and each container sees the device that claim was allocated: its own GPU, or its
// own MIG device of the asked-for profile.
func TestRealNodeRunsPodsWrittenForTheDevicePlugin(t *testing.T) {
	inLane(t, realNodeLane)
	node := realNode(t)
	ctx := t.Context()
	const profile = "1g.5gb" // a profile of the real node's A100 40GB GPUs
	migResource := corev1.ResourceName("nvidia.com/mig-" + profile)
	migClass := "mig-" + profile + ".gpudra.dev"
	for class, want := range map[string]corev1.ResourceName{api.DeviceClassGPU: "nvidia.com/gpu", migClass: migResource} {
		dc, err := client.ResourceV1().DeviceClasses().Get(ctx, class, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("DeviceClass %s: %v", class, err)
		}
		if got := ptr.Deref(dc.Spec.ExtendedResourceName, ""); got != string(want) {
			t.Fatalf("DeviceClass %s serves extended resource %q, want %s", class, got, want)
		}
	}
	ns := namespace(t, "device-plugin-names")

	whole := lab.RealNodePod(ns, "whole", node, nil)
	whole.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, whole, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	replicas := realNodeRoom(t, node) - 1
	if replicas < 2 {
		t.Fatalf("node %s has room for %d MIG replicas beside the whole GPU's pod; the test needs at least 2", node, replicas)
	}
	t.Logf("the MIG example runs %d replicas of one nvidia.com/mig-%s each", replicas, profile)
	template := lab.RealNodePod(ns, "", node, nil)
	template.Labels = map[string]string{"app": "example-mig"}
	template.Spec.Containers[0].Resources.Limits = corev1.ResourceList{migResource: resource.MustParse("1")}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "example-mig"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: template.Labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: template.ObjectMeta, Spec: template.Spec},
		},
	}
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	eventually(t, 5*time.Minute, fmt.Sprintf("all %d replicas of the MIG example run", replicas), func(ctx context.Context) error {
		list, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=example-mig"})
		if err != nil {
			return err
		}
		pods = nil
		var waiting []string
		for _, p := range list.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			pods = append(pods, p)
			if p.Status.Phase != corev1.PodRunning {
				waiting = append(waiting, p.Name+" "+string(p.Status.Phase)+schedulingMessage(&p))
			}
		}
		if len(pods) != replicas || len(waiting) > 0 {
			return fmt.Errorf("%d pods, not running: %s", len(pods), strings.Join(waiting, "; "))
		}
		return nil
	})

	devices := publishedDevices(ctx, t)
	// deviceOf checks the claim kube-scheduler made for the pod's extended resource and
	// returns the one device it was allocated.
	deviceOf := func(pod string, res corev1.ResourceName, class string) (string, resourcev1.Device) {
		t.Helper()
		p, err := client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st := p.Status.ExtendedResourceClaimStatus
		if st == nil || len(st.RequestMappings) != 1 || st.RequestMappings[0].ContainerName != "probe" || st.RequestMappings[0].ResourceName != string(res) {
			t.Fatalf("pod %s: extended resource claim status %+v, want one mapping of container probe's %s", pod, st, res)
		}
		c, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, st.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("pod %s: its claim %s: %v", pod, st.ResourceClaimName, err)
		}
		if len(c.Spec.Devices.Requests) != 1 || c.Spec.Devices.Requests[0].Exactly == nil || c.Spec.Devices.Requests[0].Exactly.DeviceClassName != class {
			t.Errorf("pod %s: claim %s requests %+v, want one request of class %s", pod, c.Name, c.Spec.Devices.Requests, class)
		}
		results, err := allocated(ctx, ns, c.Name)
		if err != nil || len(results) != 1 || results[0].Pool != node {
			t.Fatalf("pod %s: claim %s got %v (%v), want one device of node %s", pod, c.Name, results, err, node)
		}
		d, ok := devices[node+"/"+results[0].Device]
		if !ok {
			t.Fatalf("pod %s got %s, which node %s does not publish", pod, results[0].Device, node)
		}
		return results[0].Device, d
	}

	name, d := deviceOf("whole", "nvidia.com/gpu", api.DeviceClassGPU)
	r := probeOutput(t, ns, "whole")
	want := "/dev/nvidia" + stringAttr(d, "index")
	if lab.DeviceType(d) != "gpu" || r.env["GPUDRA_DEVICES"] != name || r.env["GPUDRA_VISIBLE_DEVICES"] != stringAttr(d, "uuid") ||
		!slices.Equal(r.gpuNodes(), []string{want}) || r.env["GPUDRA_COMPUTE_PERCENT_0"] != "100" {
		t.Errorf("nvidia.com/gpu: 1 got %s (type %s, uuid %s); the container reports:\n%s", name, lab.DeviceType(d), stringAttr(d, "uuid"), r.raw)
	}

	seen := map[string]string{} // MIG device and its instance → pod
	for _, p := range pods {
		name, d := deviceOf(p.Name, migResource, migClass)
		if lab.DeviceType(d) != "mig" || stringAttr(d, "migProfile") != profile {
			t.Errorf("pod %s got %s of type %s, profile %s; want a %s MIG device", p.Name, name, lab.DeviceType(d), stringAttr(d, "migProfile"), profile)
		}
		r := probeOutput(t, ns, p.Name)
		if r.env["GPUDRA_DEVICES"] != name {
			t.Errorf("pod %s: GPUDRA_DEVICES=%q in the container, allocated %s", p.Name, r.env["GPUDRA_DEVICES"], name)
		}
		checkMIGContainer(t, "pod "+p.Name, r, d, 0)
		for _, k := range []string{name, r.env["GPUDRA_VISIBLE_DEVICES"]} {
			if other, ok := seen[k]; ok {
				t.Errorf("pods %s and %s both got %s", other, p.Name, k)
			}
			seen[k] = p.Name
		}
	}
}

// checkMIGContainer checks that the container of a real-node pod (what names it) sees the
// one MIG device d, at position k of its claim's devices: the MIG device of d's parent GPU
// in GPUDRA_VISIBLE_DEVICES, the parent's device node and no other GPU's, the instance's two
// capability devices, and the instance's memory.
func checkMIGContainer(t *testing.T, what string, r probeReport, d resourcev1.Device, k int) {
	t.Helper()
	visible := strings.Split(r.env["GPUDRA_VISIBLE_DEVICES"], ",")
	parent := stringAttr(d, "parentUUID")
	if k >= len(visible) || !regexp.MustCompile(`^MIG-`+regexp.QuoteMeta(parent)+`/[0-9]+/[0-9]+$`).MatchString(visible[k]) {
		t.Errorf("%s: GPUDRA_VISIBLE_DEVICES=%q in the container, want a MIG device of GPU %s at position %d", what, r.env["GPUDRA_VISIBLE_DEVICES"], parent, k)
	}
	minor := stringAttr(d, "parentIndex")
	if got := r.gpuNodes(); !slices.Equal(got, []string{"/dev/nvidia" + minor}) || r.devices["/dev/nvidia"+minor] != "char 195:"+minor {
		t.Errorf("%s: GPU device nodes %v, want only the parent's /dev/nvidia%s", what, got, minor)
	}
	if caps := r.capNodes(); len(caps) != 2 {
		t.Errorf("%s: want the GPU and compute instance capability devices, got %v", what, caps)
	}
	c, ok := d.Capacity[api.CapMemory]
	if !ok {
		t.Errorf("%s: the MIG device publishes no memory capacity", what)
	} else if want := strconv.FormatInt(c.Value.Value()>>20, 10); r.env["GPUDRA_MEMORY_MIB_"+strconv.Itoa(k)] != want {
		t.Errorf("%s: GPUDRA_MEMORY_MIB_%d=%q, the MIG device has %s MiB", what, k, r.env["GPUDRA_MEMORY_MIB_"+strconv.Itoa(k)], want)
	}
}

// capNodes are the MIG capability device nodes of a report, sorted.
func (r probeReport) capNodes() []string {
	var out []string
	for p, what := range r.devices {
		if strings.HasPrefix(p, "/dev/nvidia-caps/") && strings.HasPrefix(what, "char ") {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// realNodeRoom is how many more pods the node takes: its pod capacity less the pods there.
func realNodeRoom(t *testing.T, node string) int {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	there, err := client.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	busy := 0
	for _, p := range there.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			busy++
		}
	}
	return int(n.Status.Allocatable.Pods().Value()) - busy
}

// containerReport waits for a container of a real-node pod to finish its probe report.
func containerReport(t *testing.T, ns, pod, container string) probeReport {
	t.Helper()
	var out string
	eventually(t, 3*time.Minute, "container "+container+" of pod "+pod+" runs and reports what it received", func(ctx context.Context) error {
		if err := podRunning(ns, pod)(ctx); err != nil {
			return err
		}
		var err error
		if out, err = lab.PodLog(state, realNode(t), ns, pod, container); err != nil {
			return err
		}
		if !strings.Contains(out, "probe-report-done") {
			return fmt.Errorf("report not complete yet: %q", out)
		}
		return nil
	})
	return parseProbe(out)
}

// convertTestdata runs the suite's gpudra convert --strict on an input of convert/testdata
// and checks it writes the converted manifests kept beside it, with nothing left unconverted.
func convertTestdata(t *testing.T, name string) []*unstructured.Unstructured {
	t.Helper()
	in := filepath.Join(repo, "convert", "testdata", name+".yaml")
	cmd := exec.CommandContext(t.Context(), gpudraCLI, "convert", "--strict", "-f", in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("gpudra convert --strict -f %s: %v\n%s", in, err, stderr.String())
	}
	want, err := os.ReadFile(filepath.Join(repo, "convert", "testdata", name+".out.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stdout.Bytes(), want) {
		t.Errorf("gpudra convert -f %s wrote\n%s\nwant (convert/testdata/%s.out.yaml)\n%s", in, stdout.String(), name, want)
	}
	if !strings.Contains(stderr.String(), " 0 not converted") {
		t.Errorf("gpudra convert -f %s reports something not converted:\n%s", in, stderr.String())
	}
	objs := decode(t, stdout.String())
	if len(objs) == 0 {
		t.Fatalf("gpudra convert -f %s wrote no objects", in)
	}
	return objs
}

// onRealNode moves converted objects into namespace ns (dropping Namespaces) and puts their
// pods on the real node, each container running the probe image instead of its own.
func onRealNode(t *testing.T, objs []*unstructured.Unstructured, ns, node string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			continue
		}
		o.SetNamespace(ns)
		var path []string
		switch o.GetKind() {
		case "Pod":
			path = []string{"spec"}
		case "Deployment", "Job", "StatefulSet":
			path = []string{"spec", "template", "spec"}
		}
		if path != nil {
			spec, _, err := unstructured.NestedMap(o.Object, path...)
			if err != nil {
				t.Fatal(err)
			}
			containers, _, _ := unstructured.NestedSlice(spec, "containers")
			for i, c := range containers {
				c := c.(map[string]any)
				delete(c, "command")
				delete(c, "args")
				c["image"], c["imagePullPolicy"] = lab.ProbeImage, string(corev1.PullNever)
				containers[i] = c
			}
			spec["containers"] = containers
			spec["nodeSelector"] = map[string]any{lab.LabelHostname: node}
			tolerations, _, _ := unstructured.NestedSlice(spec, "tolerations")
			spec["tolerations"] = append(tolerations, map[string]any{"key": lab.RealNodeTaint, "operator": "Exists", "effect": "NoSchedule"})
			spec["automountServiceAccountToken"] = false
			spec["terminationGracePeriodSeconds"] = int64(0)
			if err := unstructured.SetNestedMap(o.Object, spec, path...); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, o)
	}
	return out
}

// runningPods waits until want pods of the selector run in ns and returns them, by name.
func runningPods(t *testing.T, ns, selector string, want int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	eventually(t, 4*time.Minute, fmt.Sprintf("%d pods (%s) run", want, selector), func(ctx context.Context) error {
		list, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return err
		}
		pods = nil
		var waiting []string
		for _, p := range list.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			pods = append(pods, p)
			if p.Status.Phase != corev1.PodRunning {
				waiting = append(waiting, p.Name+" "+string(p.Status.Phase)+schedulingMessage(&p))
			}
		}
		if len(pods) != want || len(waiting) > 0 {
			return fmt.Errorf("%d pods, not running: %s", len(pods), strings.Join(waiting, "; "))
		}
		return nil
	})
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	return pods
}

// templateClaim is the claim the pod got from its ResourceClaimTemplate (pod claim name).
func templateClaim(t *testing.T, p corev1.Pod, name string) string {
	t.Helper()
	for _, st := range p.Status.ResourceClaimStatuses {
		if st.Name == name && st.ResourceClaimName != nil {
			return *st.ResourceClaimName
		}
	}
	t.Fatalf("pod %s has no claim %q from its template (statuses %+v)", p.Name, name, p.Status.ResourceClaimStatuses)
	return ""
}

// TestConvertedNVIDIAManifestsRunOnTheRealNode: manifests written for NVIDIA's DRA driver,
// rewritten by gpudra convert (convert/testdata), run on the real node as they are, but for
// the image and the node they are sent to. A time-sliced A100 at an even index per replica,
// four MIG devices of one parent GPU per replica (one per container), and a GPU per pod
// from a shared template: every claim is allocated what its converted requests say, and
// every container sees its own device.
func TestConvertedNVIDIAManifestsRunOnTheRealNode(t *testing.T) {
	inLane(t, realNodeLane)
	node := realNode(t)
	ctx := t.Context()
	ns := namespace(t, "converted")
	ap, err := lab.NewApplier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	devices := publishedDevices(ctx, t)
	// Applied one after another, each once its pods run: the time-sliced claims need GPUs 0
	// and 2, which the others could otherwise take first.

	// timeslicing: a Deployment of 2 replicas, each with a claim from the template even-a100.
	if err := ap.Apply(ctx, onRealNode(t, convertTestdata(t, "timeslicing"), ns, node)...); err != nil {
		t.Fatal(err)
	}
	indexes := map[string]string{}
	for _, p := range runningPods(t, ns, "app=sliced", 2) {
		claim := templateClaim(t, p, "gpu")
		res, err := allocated(ctx, ns, claim)
		if err != nil || len(res) != 1 || res[0].Pool != node {
			t.Fatalf("pod %s: claim %s got %v (%v), want one GPU of node %s", p.Name, claim, res, err, node)
		}
		d := devices[node+"/"+res[0].Device]
		idx := stringAttr(d, "index")
		if lab.DeviceType(d) != "gpu" || !strings.Contains(stringAttr(d, "productName"), "A100") || (idx != "0" && idx != "2") {
			t.Errorf("pod %s got %s (type %s, %s, index %s), want an A100 at index 0 or 2", p.Name, res[0].Device, lab.DeviceType(d), stringAttr(d, "productName"), idx)
		}
		if other, ok := indexes[idx]; ok {
			t.Errorf("pods %s and %s both got GPU %s", other, p.Name, idx)
		}
		indexes[idx] = p.Name
		r := containerReport(t, ns, p.Name, "ctr")
		if r.env["GPUDRA_DEVICES"] != res[0].Device || !slices.Equal(r.gpuNodes(), []string{"/dev/nvidia" + idx}) || r.env["GPUDRA_TIMESLICE"] != "Long" {
			t.Errorf("pod %s got %s; want it in the container with GPUDRA_TIMESLICE=Long, which reports:\n%s", p.Name, res[0].Device, r.raw)
		}
	}

	// mig-parent: a Deployment of 2 replicas, each with four MIG devices of one GPU, one per
	// container.
	if err := ap.Apply(ctx, onRealNode(t, convertTestdata(t, "mig-parent"), ns, node)...); err != nil {
		t.Fatal(err)
	}
	profiles := map[string]string{"small-0": "1g.5gb", "small-1": "1g.5gb", "medium": "2g.10gb", "large": "3g.20gb"}
	containers := map[string]string{"small-0": "c0", "small-1": "c1", "medium": "c2", "large": "c3"}
	parents := map[string]string{}
	for _, p := range runningPods(t, ns, "app=mig-workers", 2) {
		claim := templateClaim(t, p, "mig")
		res, err := allocated(ctx, ns, claim)
		if err != nil || len(res) != 4 {
			t.Fatalf("pod %s: claim %s got %v (%v), want 4 MIG devices", p.Name, claim, res, err)
		}
		var names []string
		for _, x := range res {
			names = append(names, x.Device)
		}
		parent := ""
		instances := map[string]string{}
		for _, x := range res {
			d := devices[node+"/"+x.Device]
			if x.Pool != node || lab.DeviceType(d) != "mig" || stringAttr(d, "migProfile") != profiles[x.Request] {
				t.Errorf("pod %s: request %s got %s/%s (type %s, profile %s), want a %s MIG device of node %s",
					p.Name, x.Request, x.Pool, x.Device, lab.DeviceType(d), stringAttr(d, "migProfile"), profiles[x.Request], node)
			}
			if parent == "" {
				parent = stringAttr(d, "parentUUID")
			} else if got := stringAttr(d, "parentUUID"); got != parent {
				t.Errorf("pod %s: request %s got a MIG device of GPU %s, the others' are of %s", p.Name, x.Request, got, parent)
			}
			c := containers[x.Request]
			r := containerReport(t, ns, p.Name, c)
			if got := strings.Join(names, ","); r.env["GPUDRA_DEVICES"] != got {
				t.Errorf("pod %s container %s: GPUDRA_DEVICES=%q, the claim's devices are %s", p.Name, c, r.env["GPUDRA_DEVICES"], got)
			}
			k := slices.Index(names, x.Device)
			checkMIGContainer(t, fmt.Sprintf("pod %s container %s (%s)", p.Name, c, x.Device), r, d, k)
			for key := range r.env {
				if strings.HasPrefix(key, "GPUDRA_MEMORY_MIB_") && key != "GPUDRA_MEMORY_MIB_"+strconv.Itoa(k) {
					t.Errorf("pod %s container %s sees %s=%s of another container's MIG device", p.Name, c, key, r.env[key])
				}
			}
			caps := strings.Join(r.capNodes(), " ")
			if other, ok := instances[caps]; ok {
				t.Errorf("pod %s: containers %s and %s see the same MIG instance (%s)", p.Name, other, c, caps)
			}
			instances[caps] = c
		}
		if other, ok := parents[parent]; ok {
			t.Errorf("pods %s and %s both got MIG devices of GPU %s, which holds one set", other, p.Name, parent)
		}
		parents[parent] = p.Name
	}

	// one-gpu: two pods, each with a GPU of its own from the template one-gpu.
	objs := onRealNode(t, convertTestdata(t, "one-gpu"), ns, node)
	for _, o := range objs {
		if o.GetKind() == "Pod" {
			o.SetLabels(map[string]string{"app": "one-gpu"})
		}
	}
	if err := ap.Apply(ctx, objs...); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, p := range runningPods(t, ns, "app=one-gpu", 2) {
		claim := templateClaim(t, p, "gpu")
		res, err := allocated(ctx, ns, claim)
		if err != nil || len(res) != 1 || res[0].Pool != node || lab.DeviceType(devices[node+"/"+res[0].Device]) != "gpu" {
			t.Fatalf("pod %s: claim %s got %v (%v), want one whole GPU of node %s", p.Name, claim, res, err, node)
		}
		if other, ok := got[res[0].Device]; ok {
			t.Errorf("pods %s and %s both got %s", other, p.Name, res[0].Device)
		}
		got[res[0].Device] = p.Name
		r := containerReport(t, ns, p.Name, "cuda")
		d := devices[node+"/"+res[0].Device]
		if r.env["GPUDRA_DEVICES"] != res[0].Device || r.env["GPUDRA_VISIBLE_DEVICES"] != stringAttr(d, "uuid") || len(r.gpuNodes()) != 1 {
			t.Errorf("pod %s got %s; the container reports:\n%s", p.Name, res[0].Device, r.raw)
		}
	}
}

// TestEveryConvertedSharingManifestRunsOnTheRealNode: the converted manifests of the
// driver's sharing cases (a GPU shared by two containers, by two pods, MPS configs, memory
// shares) run on the real node one after another: every pod runs and every claim its pods
// use is allocated on the real node.
func TestEveryConvertedSharingManifestRunsOnTheRealNode(t *testing.T) {
	inLane(t, realNodeLane)
	node := realNode(t)
	ap, err := lab.NewApplier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		pods int
	}{
		{"shared-containers", 1},
		{"shared-pods", 2},
		{"mps", 1},
		{"memory-shares", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := namespace(t, "converted-"+tc.name)
			if err := ap.Apply(t.Context(), onRealNode(t, convertTestdata(t, tc.name), ns, node)...); err != nil {
				t.Fatal(err)
			}
			used := map[string]bool{} // the claims the pods use (a claim no pod uses stays unallocated)
			for _, p := range runningPods(t, ns, "", tc.pods) {
				for _, rc := range p.Spec.ResourceClaims {
					if rc.ResourceClaimName != nil {
						used[*rc.ResourceClaimName] = true
					}
				}
				for _, st := range p.Status.ResourceClaimStatuses {
					if st.ResourceClaimName != nil {
						used[*st.ResourceClaimName] = true
					}
				}
			}
			if len(used) == 0 {
				t.Fatalf("the pods of %s use no claims", ns)
			}
			for name := range used {
				c, err := client.ResourceV1().ResourceClaims(ns).Get(t.Context(), name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				a := c.Status.Allocation
				if a == nil || len(a.Devices.Results) == 0 {
					t.Errorf("claim %s is not allocated", c.Name)
					continue
				}
				for _, r := range a.Devices.Results {
					if r.Pool != node {
						t.Errorf("claim %s got %s/%s, not a device of %s", c.Name, r.Pool, r.Device, node)
					}
				}
			}
		})
	}
}

//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/kubeletplugin"
	"github.com/gpudra/gpudra/lab"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// setRealNodePluginMIG sets the --mig flag of the real node's plugin DaemonSet and waits until
// the node's one plugin pod runs with it.
func setRealNodePluginMIG(t *testing.T, ctx context.Context, node, mig string) error {
	t.Helper()
	return updateRealNodePlugin(t, ctx, node, "--mig="+mig, func(s *corev1.PodSpec) { setArg(&s.Containers[0], "mig", mig) })
}

// updateRealNodePlugin changes the pod template of the real node's plugin DaemonSet with edit
// and waits until the node's one plugin pod is ready and runs the changed template (what
// names the change, for the log and errors). An edit that changes nothing only waits.
func updateRealNodePlugin(t *testing.T, ctx context.Context, node, what string, edit func(*corev1.PodSpec)) error {
	t.Helper()
	dsNS, dsName, ok := state.RealNodePluginDaemonSet(node)
	if !ok {
		return fmt.Errorf("%s: the lab runs the real node's plugin as a process, not as the chart's DaemonSet", what)
	}
	var want *corev1.PodSpec
	var generation int64
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds, err := client.AppsV1().DaemonSets(dsNS).Get(ctx, dsName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		spec := ds.Spec.Template.Spec.DeepCopy()
		edit(spec)
		want, generation = spec, ds.Generation
		if equality.Semantic.DeepEqual(*spec, ds.Spec.Template.Spec) {
			return nil
		}
		ds.Spec.Template.Spec = *spec
		updated, err := client.AppsV1().DaemonSets(dsNS).Update(ctx, ds, metav1.UpdateOptions{})
		if err == nil {
			generation = updated.Generation
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("%s on DaemonSet %s/%s: %w", what, dsNS, dsName, err)
	}
	start := time.Now()
	var last error
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		ds, err := client.AppsV1().DaemonSets(dsNS).Get(ctx, dsName, metav1.GetOptions{})
		switch {
		case err != nil:
			last = err
		case ds.Status.ObservedGeneration < generation || ds.Status.UpdatedNumberScheduled != ds.Status.DesiredNumberScheduled:
			last = fmt.Errorf("DaemonSet %s/%s: generation %d observed %d, %d of %d pods updated", dsNS, dsName, generation, ds.Status.ObservedGeneration, ds.Status.UpdatedNumberScheduled, ds.Status.DesiredNumberScheduled)
		default:
			if p := realNodePluginPodNow(ctx, node); p == nil {
				last = fmt.Errorf("plugin pods: %s", describeRealNodePluginPods(t, node))
			} else if diff := podRunsSpec(p, want); diff != "" {
				last = fmt.Errorf("the plugin pod %s %s", p.Name, diff)
			} else {
				last = nil
			}
		}
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("the real node's plugin pod does not run with %s after 3 minutes: %v", what, last)
	}
	t.Logf("the real node's plugin pod runs with %s (after %s)", what, time.Since(start).Round(10*time.Millisecond))
	return nil
}

// restoreRealNodePluginAtEnd gives the real node's plugin DaemonSet back the pod template it
// has now when the test ends (and waits for its pod), whatever the test changed in it.
func restoreRealNodePluginAtEnd(t *testing.T, node string) {
	t.Helper()
	dsNS, dsName, ok := state.RealNodePluginDaemonSet(node)
	if !ok {
		labLacks(t, "the real node's plugin as the chart's DaemonSet (install: chart), whose pod template the test changes")
	}
	ds, err := client.AppsV1().DaemonSets(dsNS).Get(t.Context(), dsName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	orig := ds.Spec.Template.Spec.DeepCopy()
	t.Cleanup(func() {
		if err := updateRealNodePlugin(t, context.Background(), node, "its original pod template", func(s *corev1.PodSpec) { *s = *orig.DeepCopy() }); err != nil {
			t.Error(err)
		}
	})
}

// podRunsSpec says how the pod differs from the DaemonSet pod template spec it should run
// ("" when it does not): its hostPID, its first container's command, args and mounts, and its
// volumes (but the service-account token's, which the API server adds).
func podRunsSpec(p *corev1.Pod, want *corev1.PodSpec) string {
	got, wc := p.Spec.Containers[0], want.Containers[0]
	switch {
	case p.Spec.HostPID != want.HostPID:
		return fmt.Sprintf("has hostPID %v, want %v", p.Spec.HostPID, want.HostPID)
	case !slices.Equal(got.Command, wc.Command) || !slices.Equal(got.Args, wc.Args):
		return fmt.Sprintf("runs %q, want %q", append(got.Command, got.Args...), append(wc.Command, wc.Args...))
	}
	mounts := func(ms []corev1.VolumeMount) []string {
		var out []string
		for _, m := range ms {
			if !strings.HasPrefix(m.Name, "kube-api-access-") {
				out = append(out, m.Name+"="+m.MountPath)
			}
		}
		slices.Sort(out)
		return out
	}
	volumes := func(vs []corev1.Volume) []string {
		var out []string
		for _, v := range vs {
			if !strings.HasPrefix(v.Name, "kube-api-access-") {
				out = append(out, v.Name)
			}
		}
		slices.Sort(out)
		return out
	}
	if g, w := mounts(got.VolumeMounts), mounts(wc.VolumeMounts); !slices.Equal(g, w) {
		return fmt.Sprintf("mounts %v, want %v", g, w)
	}
	if g, w := volumes(p.Spec.Volumes), volumes(want.Volumes); !slices.Equal(g, w) {
		return fmt.Sprintf("has volumes %v, want %v", g, w)
	}
	return ""
}

// setArg sets --name=value in the container's args; removeArg removes --name=... .
func setArg(c *corev1.Container, name, value string) {
	if i := slices.IndexFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--"+name+"=") }); i >= 0 {
		c.Args[i] = "--" + name + "=" + value
		return
	}
	c.Args = append(c.Args, "--"+name+"="+value)
}

func removeArg(c *corev1.Container, name string) {
	c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--"+name+"=") })
}

// setHostPathMount mounts the host path (a volume named name) at mountPath in the spec's first
// container, replacing a volume and mount of that name.
func setHostPathMount(s *corev1.PodSpec, name, hostPath string, kind corev1.HostPathType, mountPath string, readOnly bool) {
	s.Volumes = slices.DeleteFunc(s.Volumes, func(v corev1.Volume) bool { return v.Name == name })
	s.Volumes = append(s.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostPath, Type: &kind}}})
	c := &s.Containers[0]
	c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == name })
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: mountPath, ReadOnly: readOnly})
}

// migOfNode is what a node publishes of MIG: each GPU's MIG devices by profile (keyed by the
// parent's index), and every device by name.
type migOfNode struct {
	byGPU   map[string]map[string]int
	devices map[string]resourcev1.Device
	gpus    int // whole GPUs published
}

func (m migOfNode) String() string {
	b, _ := json.Marshal(m.byGPU)
	return fmt.Sprintf("%d whole GPUs, MIG devices per GPU %s", m.gpus, b)
}

// nodeMIG reads what the node publishes now, from its complete pool of the newest generation.
func nodeMIG(ctx context.Context, node string) (migOfNode, error) {
	out := migOfNode{byGPU: map[string]map[string]int{}, devices: map[string]resourcev1.Device{}}
	slices, err := lab.NodeSlices(ctx, client, node)
	if err != nil {
		return out, err
	}
	if len(slices) == 0 || int64(len(slices)) != slices[0].Spec.Pool.ResourceSliceCount {
		return out, fmt.Errorf("node %s's pool is incomplete (%d slices)", node, len(slices))
	}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			out.devices[d.Name] = d
			switch lab.DeviceType(d) {
			case "gpu":
				out.gpus++
			case "mig":
				gpu := stringAttr(d, "parentIndex")
				if out.byGPU[gpu] == nil {
					out.byGPU[gpu] = map[string]int{}
				}
				out.byGPU[gpu][stringAttr(d, "migProfile")]++
			}
		}
	}
	return out, nil
}

// nodeLabel is a condition: the node's label key has the value want.
func nodeLabel(node, key, want string) func(context.Context) error {
	return func(ctx context.Context) error {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := n.Labels[key]; got != want {
			return fmt.Errorf("node %s has %s=%q", node, key, got)
		}
		return nil
	}
}

// labelNode sets (or, with "", removes) a label of the node.
func labelNode(ctx context.Context, node, key, value string) error {
	v := "null"
	if value != "" {
		v = fmt.Sprintf("%q", value)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, key, v)
	_, err := client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// TestRealNodeMIGLayoutsFromTheNodeLabel: the real node's plugin switched to --mig=static
// (with the chart's layouts, --mig-layouts) publishes no MIG device while its A100s are not
// in MIG mode. Labelled gpu.gpudra.dev/mig-config=all-balanced, it partitions every GPU as the
// layout says and publishes exactly those instances; a claim for one of them is prepared on
// the existing instance, its container sees that instance's UUID, and it is unprepared
// leaving the layout as it was. Relabelled all-1g.5gb while a claim holds an instance, the
// other GPUs follow at once and the held GPU keeps its instances (state pending) until the
// claim is gone. The plugin gets its original flags back at the end.
func TestRealNodeMIGLayoutsFromTheNodeLabel(t *testing.T) {
	inLane(t, realNodeLane)
	node := realNode(t)
	if _, _, ok := state.RealNodePluginDaemonSet(node); !ok {
		labLacks(t, "the real node's plugin as the chart's DaemonSet (install: chart), whose flags the test changes")
	}
	ctx := t.Context()
	args := realNodePluginArgs(t, node)
	orig, _ := flagValue(args, "mig")
	if _, ok := flagValue(args, "mig-layouts"); !ok {
		labLacks(t, "a plugin with MIG layouts (--mig-layouts, the chart's kubeletPlugin.migLayouts)")
	}
	t.Logf("the real node's plugin runs with --mig=%s", orig)
	restored := false
	t.Cleanup(func() {
		ctx := context.Background()
		if !restored { // the test failed before it set the flags back
			if err := labelNode(ctx, node, api.LabelMIGConfig, ""); err != nil {
				t.Errorf("remove label %s of node %s: %v", api.LabelMIGConfig, node, err)
			}
			if err := setRealNodePluginMIG(t, ctx, node, cmp.Or(orig, "static")); err != nil {
				t.Error(err)
			}
		}
		if err := labelNode(ctx, node, api.LabelMIGConfigState, ""); err != nil {
			t.Errorf("remove label %s of node %s: %v", api.LabelMIGConfigState, node, err)
		}
	})
	const gpus = 8 // the real node's dgx-a100
	if got := nodeProfile(node); got != "dgx-a100" {
		t.Fatalf("node %s simulates %s; the test's layouts are for its dgx-a100 (A100 40GB)", node, got)
	}

	if err := setRealNodePluginMIG(t, ctx, node, "static"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "under --mig=static the node publishes its GPUs whole and no MIG device", func(ctx context.Context) error {
		m, err := nodeMIG(ctx, node)
		if err == nil && (m.gpus != gpus || len(m.byGPU) > 0) {
			err = fmt.Errorf("node %s publishes %s", node, m)
		}
		return err
	})

	// layout waits until the node reports state and publishes exactly want per GPU.
	layout := func(what, wantState string, want func(gpu string) map[string]int) migOfNode {
		t.Helper()
		var m migOfNode
		eventually(t, 3*time.Minute, what, func(ctx context.Context) error {
			if err := nodeLabel(node, api.LabelMIGConfigState, wantState)(ctx); err != nil {
				return err
			}
			var err error
			if m, err = nodeMIG(ctx, node); err != nil {
				return err
			}
			if m.gpus != 0 {
				return fmt.Errorf("node %s publishes %s, want no whole GPU (all are in MIG mode)", node, m)
			}
			for i := range gpus {
				gpu := fmt.Sprint(i)
				if !maps.Equal(m.byGPU[gpu], want(gpu)) {
					return fmt.Errorf("GPU %s has MIG devices %v, want %v (node: %s)", gpu, m.byGPU[gpu], want(gpu), m)
				}
			}
			if len(m.byGPU) != gpus {
				return fmt.Errorf("node %s publishes %s", node, m)
			}
			return nil
		})
		return m
	}
	balanced := map[string]int{"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
	small := map[string]int{"1g.5gb": 7}

	if err := labelNode(ctx, node, api.LabelMIGConfig, "all-balanced"); err != nil {
		t.Fatal(err)
	}
	m := layout("the node has layout all-balanced: two 1g.5gb, a 2g.10gb and a 3g.20gb on each GPU", api.MIGConfigSuccess,
		func(string) map[string]int { return balanced })
	for name, d := range m.devices {
		if lab.DeviceType(d) == "mig" && !strings.HasPrefix(stringAttr(d, "uuid"), "MIG-") {
			t.Errorf("MIG device %s of an existing instance has uuid %q, want the instance's MIG UUID", name, stringAttr(d, "uuid"))
		}
	}
	nodeEvent(t, node, kubeletplugin.ReasonMIGLayoutApplied, `"all-balanced"`)

	ns := namespace(t, "mig-layouts")
	claim := claimOf(ns, "small", api.DeviceClassMIG, nil, `device.attributes["gpu.gpudra.dev"].migProfile == "1g.5gb"`)
	created, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, lab.RealNodePod(ns, "small", node, []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("small")}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := probeOutput(t, ns, "small")
	res, err := allocated(ctx, ns, "small")
	if err != nil || len(res) != 1 || res[0].Pool != node {
		t.Fatalf("claim small: want one device of node %s, got %v (%v)", node, res, err)
	}
	held := m.devices[res[0].Device]
	heldGPU, uuid := stringAttr(held, "parentIndex"), stringAttr(held, "uuid")
	t.Logf("claim small holds %s (GPU %s, %s)", res[0].Device, heldGPU, uuid)
	if r.env["GPUDRA_DEVICES"] != res[0].Device || r.env["GPUDRA_VISIBLE_DEVICES"] != uuid {
		t.Errorf("the container has GPUDRA_DEVICES=%q GPUDRA_VISIBLE_DEVICES=%q, want the existing instance %s (%s)", r.env["GPUDRA_DEVICES"], r.env["GPUDRA_VISIBLE_DEVICES"], res[0].Device, uuid)
	}
	if got := r.gpuNodes(); !slices.Equal(got, []string{"/dev/nvidia" + heldGPU}) || len(r.capNodes()) != 2 {
		t.Errorf("the container has GPU device nodes %v and capability devices %v, want GPU %s's and its instance's two", got, r.capNodes(), heldGPU)
	}

	// Relabelled while the claim holds an instance of GPU heldGPU.
	if err := labelNode(ctx, node, api.LabelMIGConfig, "all-1g.5gb"); err != nil {
		t.Fatal(err)
	}
	m = layout("the node has layout all-1g.5gb but on GPU "+heldGPU+", whose claim keeps its instances (pending)", api.MIGConfigPending,
		func(gpu string) map[string]int {
			if gpu == heldGPU {
				return balanced
			}
			return small
		})
	if d, ok := m.devices[res[0].Device]; !ok || stringAttr(d, "uuid") != uuid {
		t.Errorf("the held instance %s (%s) is not published as it was after the relabel (uuid %q)", res[0].Device, uuid, stringAttr(d, "uuid"))
	}
	nodeEvent(t, node, kubeletplugin.ReasonMIGLayoutPending, "GPU "+heldGPU)
	if err := podRunning(ns, "small")(ctx); err != nil {
		t.Errorf("the pod holding the instance, after the relabel: %v", err)
	}

	// The claim goes: its GPU follows the layout.
	if err := client.CoreV1().Pods(ns).Delete(ctx, "small", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "claim small is unprepared", func(ctx context.Context) error {
		if _, err := client.CoreV1().Pods(ns).Get(ctx, "small", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod small still there (%v)", err)
		}
		if specs := cdiSpecsMentioning(t, node, string(created.UID)); len(specs) > 0 {
			return fmt.Errorf("CDI specs still name the claim: %v", specs)
		}
		return nil
	})
	layout("every GPU has layout all-1g.5gb once the claim is gone", api.MIGConfigSuccess, func(string) map[string]int { return small })

	// The layout's label goes first, so that the restored plugin has none to report on.
	if err := labelNode(ctx, node, api.LabelMIGConfig, ""); err != nil {
		t.Fatal(err)
	}
	if err := setRealNodePluginMIG(t, ctx, node, cmp.Or(orig, "static")); err != nil {
		t.Fatal(err)
	}
	restored = true
	if orig == "dynamic" {
		eventually(t, 2*time.Minute, "back under --mig=dynamic the node publishes its GPUs whole and every MIG placement", func(ctx context.Context) error {
			m, err := nodeMIG(ctx, node)
			if err == nil && (m.gpus != gpus || len(m.byGPU) != gpus || m.byGPU["0"]["1g.5gb"] != 7) {
				err = fmt.Errorf("node %s publishes %s", node, m)
			}
			return err
		})
	}
}

// nodeEvent waits for an Event on the Node with the reason, whose message contains want.
func nodeEvent(t *testing.T, node, reason, want string) {
	t.Helper()
	eventually(t, time.Minute, "an Event "+reason+" on node "+node, func(ctx context.Context) error {
		events, err := client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node + ",reason=" + reason})
		if err != nil {
			return err
		}
		var seen []string
		for _, e := range events.Items {
			if strings.Contains(e.Message, want) {
				return nil
			}
			seen = append(seen, e.Message)
		}
		return fmt.Errorf("no %s Event naming %s: %v", reason, want, seen)
	})
}

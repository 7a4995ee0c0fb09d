//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/lab"
	"github.com/gpudra/gpudra/scheduler/fragmentation"
	"github.com/gpudra/gpudra/sim"
	"github.com/gpudra/gpudra/topology/placement"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/sim/reproduction"
)

// replayProfile is the gpudra-scheduler profile that scores by GPU fragmentation alone,
// ties to the first node by name (deployments/scheduler/scheduler-config.yaml).
const replayProfile = "gpudra-fragmentation"

// TestGpudraSchedulerPlacesLikeTheSimulator replays a small piece of the Alibaba trace
// (testdata/replay: four of its GPU nodes, its first 40 pods) in the lab, one pod at a
// time through gpudra-scheduler's gpudra-fragmentation profile, and through the simulator
// with the same policy and typical pods: every pod must land on the node the simulator
// chose, on the GPUs it expected the allocator to take, and the pods the simulator could
// not place must stay unschedulable.
func TestGpudraSchedulerPlacesLikeTheSimulator(t *testing.T) {
	inLane(t, clusterLane)
	if state.Scheduler != lab.GpudraScheduler {
		labLacks(t, "%s: the lab runs %s (lab file scheduler:)", lab.GpudraScheduler, state.Scheduler)
	}
	specs, err := reproduction.LoadNodes("testdata/replay/nodes.csv")
	if err != nil {
		t.Fatal(err)
	}
	pods, err := reproduction.LoadPods("testdata/replay/pods.csv")
	if err != nil {
		t.Fatal(err)
	}
	addNodes(t, specs, func(s placement.NodeSpec) lab.Node {
		return lab.Node{Name: s.Name, Profile: "trace-replay", Block: "block-replay", Rack: "rack-replay", ToR: "tor-replay",
			Resources: lab.NodeResources{CPU: strconv.FormatInt(s.CPU, 10) + "m", Memory: strconv.FormatInt(s.Memory, 10) + "Mi", Pods: 110}}
	})
	ns := namespace(t, "trace-replay")

	// The simulator: same nodes (GPU models by product name, as the plugin sees them),
	// ties to the smallest rank = the first name, the shipped profile's typical pods.
	slices.SortFunc(specs, func(a, b placement.NodeSpec) int { return strings.Compare(a.Name, b.Name) })
	var nodes []*placement.Node
	for i, s := range specs {
		m, err := placement.ModelByCode(s.Model)
		if err != nil {
			t.Fatal(err)
		}
		s.Model = m.ProductName
		nodes = append(nodes, placement.NewNode(s, i))
	}
	policy, err := reproduction.NewPolicy(placement.GpudraName, reproduction.Setup{Typical: replayTypicalPods(t)})
	if err != nil {
		t.Fatal(err)
	}
	simSched := reproduction.NewScheduler(nodes, policy, nil)

	placed, unschedulable, notFirst := 0, 0, 0
	for k := range pods {
		p := &pods[k]
		if len(p.Models) > 0 {
			t.Fatalf("pod %s: the replay trace has no gpu_spec pods (the simulator side would need product names)", p.Name)
		}
		want, fits := simSched.Best(p, nil)
		node, gpus := replayPod(t, ns, p, int64(k))
		if !fits {
			if node != "" {
				t.Fatalf("pod %s (%s): gpudra-scheduler bound it to %s; the simulator found no node", p.Name, shape(p), node)
			}
			unschedulable++
			continue
		}
		wantNode := nodes[want.Node]
		if node != wantNode.Name {
			t.Fatalf("pod %s (%s): gpudra-scheduler chose %q, the simulator %q (after %d pods placed alike)", p.Name, shape(p), node, wantNode.Name, placed)
		}
		if !slices.Equal(gpus, want.GPUs) {
			t.Fatalf("pod %s on %s: the allocator took GPUs %v, the policy expected first fit %v", p.Name, node, gpus, want.GPUs)
		}
		if err := wantNode.Place(p, gpus); err != nil {
			t.Fatal(err)
		}
		placed++
		if want.Node != 0 {
			notFirst++
		}
	}
	t.Logf("%d pods placed as the simulator placed them (%d not on the first node by name), %d unschedulable in both", placed, notFirst, unschedulable)
	if placed < 15 || notFirst < 5 || unschedulable < 1 {
		t.Fatalf("the replay decided too little to prove anything: %d placed, %d not on the first node, %d unschedulable", placed, notFirst, unschedulable)
	}
}

// addNodes creates trace-like nodes as kwok nodes (labels and resources from node) with
// the ResourceSlices gpudra publishes for them (what `gpudra sim` allocates from), and
// removes them afterwards.
func addNodes(t *testing.T, specs []placement.NodeSpec, node func(placement.NodeSpec) lab.Node) {
	ctx := t.Context()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, s := range specs {
			err := client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{},
				metav1.ListOptions{FieldSelector: resourcev1.ResourceSliceSelectorNodeName + "=" + s.Name})
			if err != nil {
				t.Errorf("delete the slices of %s: %v", s.Name, err)
			}
			if err := client.CoreV1().Nodes().Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete node %s: %v", s.Name, err)
			}
		}
	})
	for _, s := range specs {
		if err := lab.AddKwokNode(ctx, client, node(s)); err != nil {
			t.Fatal(err)
		}
		rs, err := sim.Slices(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, sl := range rs {
			if _, err := client.ResourceV1().ResourceSlices().Create(ctx, sl, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	eventually(t, time.Minute, "the added nodes are Ready", func(ctx context.Context) error {
		for _, s := range specs {
			n, err := client.CoreV1().Nodes().Get(ctx, s.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			ready := false
			for _, c := range n.Status.Conditions {
				ready = ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
			}
			if !ready {
				return fmt.Errorf("node %s is not Ready", s.Name)
			}
		}
		return nil
	})
}

// replayTypicalPods are the typical pods of the shipped gpudra-fragmentation profile.
func replayTypicalPods(t *testing.T) []placement.Pod {
	var cfg struct {
		Profiles []struct {
			SchedulerName string `json:"schedulerName"`
			PluginConfig  []struct {
				Name string             `json:"name"`
				Args fragmentation.Args `json:"args"`
			} `json:"pluginConfig"`
		} `json:"profiles"`
	}
	if err := yaml.Unmarshal(deployments.SchedulerConfiguration, &cfg); err != nil {
		t.Fatal(err)
	}
	for _, p := range cfg.Profiles {
		for _, pc := range p.PluginConfig {
			if p.SchedulerName == replayProfile && pc.Name == fragmentation.Name {
				if pc.Args.TieBreak != fragmentation.TieBreakNodeName {
					t.Fatalf("profile %s breaks ties by %q; the replay needs %s", replayProfile, pc.Args.TieBreak, fragmentation.TieBreakNodeName)
				}
				return pc.Args.Pods()
			}
		}
	}
	t.Fatalf("deployments/scheduler/scheduler-config.yaml has no %s args in profile %s", fragmentation.Name, replayProfile)
	return nil
}

// replayPod submits one trace pod (its claim as a user writes it) to the gpudra-fragmentation
// profile, restricted to the replay nodes, and waits until it is bound (node, GPU indices)
// or reported unschedulable ("" and the pod deleted).
func replayPod(t *testing.T, ns string, p *placement.Pod, uid int64) (string, []int) {
	ctx := t.Context()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: ns},
		Spec: corev1.PodSpec{
			SchedulerName: replayProfile,
			NodeSelector:  map[string]string{lab.LabelProfile: "trace-replay"},
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU:    *resource.NewMilliQuantity(p.CPU, resource.DecimalSI),
				corev1.ResourceMemory: resource.MustParse(strconv.FormatInt(p.Memory, 10) + "Mi"),
			}}}},
		},
	}
	claim, err := sim.Claim(p, nil, uid)
	if err != nil {
		t.Fatal(err)
	}
	if claim != nil {
		claim.Namespace, claim.UID = ns, ""
		if _, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claim.Name}}
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var node string
	deadline := time.Now().Add(time.Minute)
	for node == "" {
		got, err := client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node = got.Spec.NodeName
		for _, c := range got.Status.Conditions {
			if node == "" && c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				if err := client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				return "", nil
			}
		}
		if node == "" && time.Now().After(deadline) {
			t.Fatalf("pod %s: neither bound nor unschedulable after a minute", p.Name)
		}
		if node == "" {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if claim == nil {
		return node, nil
	}
	var gpus []int
	eventually(t, 30*time.Second, "claim "+claim.Name+" allocated", func(ctx context.Context) error {
		res, err := allocated(ctx, ns, claim.Name)
		if err != nil {
			return err
		}
		gpus = gpus[:0]
		for _, r := range res {
			i, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(r.Device, "gpu-"), "-share"))
			if err != nil {
				return fmt.Errorf("device %s is neither gpu-<i> nor gpu-<i>-share", r.Device)
			}
			gpus = append(gpus, i)
		}
		slices.Sort(gpus)
		return nil
	})
	return node, gpus
}

func shape(p *placement.Pod) string {
	return fmt.Sprintf("cpu %dm, %d GPU × %d‰", p.CPU, p.GPUs, p.GPUMilli)
}

// TestGpudraSchedulerPicksTheRackAGangFragmentsLeast: a PodGroup of two 4-GPU pods that
// must share one rack (schedulingConstraints.topology on topology.gpudra.dev/rack), five
// racks of two 8-GPU nodes, one of them (not the first by name) already half used. Every
// rack fits the gang, so kube-scheduler's own PlacementScore (pods count) ties them all;
// gpudra's GPUFragmentation scores each rack by the fragmentation the gang adds and must
// pick the half-used one, keeping the other racks' nodes whole (a random choice would be
// right one time in five).
func TestGpudraSchedulerPicksTheRackAGangFragmentsLeast(t *testing.T) {
	inLane(t, clusterLane)
	if state.Scheduler != lab.GpudraScheduler {
		labLacks(t, "%s: the lab runs %s (lab file scheduler:)", lab.GpudraScheduler, state.Scheduler)
	}
	ctx := t.Context()
	const profile = "placement-test"
	var specs []placement.NodeSpec
	rackOf := map[string]string{}
	for r := 1; r <= 5; r++ {
		for k := 1; k <= 2; k++ {
			name := fmt.Sprintf("gang-r%d-n%d", r, k)
			specs = append(specs, placement.NodeSpec{Name: name, CPU: 96000, Memory: 786432, GPUs: 8, Model: "V100M32"})
			rackOf[name] = fmt.Sprintf("rack-g%d", r)
		}
	}
	addNodes(t, specs, func(s placement.NodeSpec) lab.Node {
		return lab.Node{Name: s.Name, Profile: profile, Block: "block-g", Rack: rackOf[s.Name], ToR: "tor-" + rackOf[s.Name],
			Resources: lab.NodeResources{CPU: "96", Memory: "768Gi", Pods: 110}}
	})
	ns := namespace(t, "gang-placement")

	fourGPUs := func(name string, pin map[string]string, group string) *corev1.Pod {
		p := &placement.Pod{Name: name, CPU: 8000, Memory: 65536, GPUs: 4, GPUMilli: 1000}
		claim, err := sim.Claim(p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		claim.Namespace, claim.UID = ns, ""
		if _, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{
				NodeSelector:   pin,
				Containers:     []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}}}},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claim.Name}},
			},
		}
		if group != "" {
			pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &group}
		}
		if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return pod
	}
	// Half-use rack-g3: four GPUs on each of its nodes.
	for _, n := range []string{"gang-r3-n1", "gang-r3-n2"} {
		fourGPUs("busy-"+n, map[string]string{lab.LabelHostname: n}, "")
	}
	for _, n := range []string{"gang-r3-n1", "gang-r3-n2"} {
		eventually(t, time.Minute, "busy-"+n+" bound", func(ctx context.Context) error {
			p, err := client.CoreV1().Pods(ns).Get(ctx, "busy-"+n, metav1.GetOptions{})
			if err == nil && p.Spec.NodeName != n {
				err = fmt.Errorf("on %q", p.Spec.NodeName)
			}
			return err
		})
	}

	pg := &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "gang", Namespace: ns},
		Spec: schedulingv1beta1.PodGroupSpec{
			SchedulingPolicy:      schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2}},
			SchedulingConstraints: &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: api.LabelRack}}},
		},
	}
	if _, err := client.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := client.SchedulingV1beta1().PodGroups(ns).Get(ctx, pg.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.SchedulingConstraints == nil || len(got.Spec.SchedulingConstraints.Topology) == 0 {
		t.Fatal("the API server dropped the PodGroup's topology constraint: TopologyAwareWorkloadScheduling is not enabled")
	}
	for i := range 2 {
		fourGPUs(fmt.Sprintf("worker-%d", i), map[string]string{lab.LabelProfile: profile}, pg.Name)
	}
	racks := map[string]bool{}
	eventually(t, 2*time.Minute, "both gang pods bound", func(ctx context.Context) error {
		clear(racks)
		for i := range 2 {
			p, err := client.CoreV1().Pods(ns).Get(ctx, fmt.Sprintf("worker-%d", i), metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Spec.NodeName == "" {
				return fmt.Errorf("pod %s not bound: %s", p.Name, schedulingMessage(p))
			}
			racks[rackOf[p.Spec.NodeName]] = true
		}
		return nil
	})
	if len(racks) != 1 || !racks["rack-g3"] {
		t.Fatalf("the gang went to racks %v; want only rack-g3, the half-used one", racks)
	}
}

//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/defrag"
	"github.com/gpudra/gpudra/lab"
)

// defragNodeLabel marks the nodes the defragmentation test's pods may run on.
const defragNodeLabel = "e2e.gpudra.dev/defrag"

// shareDeployment is a Deployment of one pod holding half a GPU, allowed on the nodes
// labelled defragNodeLabel=yes; movable adds the gpudra.dev/movable opt-in. Its pods are
// placed by gpudra-scheduler's gpudra-fragmentation profile, which packs: defragmentation
// needs a scheduler that puts an evicted pod where it leaves the least fragmented room.
func shareDeployment(ns, name, app string, movable bool) string {
	opt := ""
	if movable {
		opt = `, gpudra.dev/movable: "true"`
	}
	return fmt.Sprintf(`
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: %[2]s, namespace: %[1]s}
spec:
  replicas: 1
  selector: {matchLabels: {name: %[2]s}}
  template:
    metadata:
      labels: {name: %[2]s, app: %[3]s%[4]s}
    spec:
      schedulerName: gpudra-fragmentation
      terminationGracePeriodSeconds: 0
      nodeSelector: {%[5]s: "yes"}
      resourceClaims: [{name: gpu, resourceClaimTemplateName: half}]
      containers:
      - name: main
        image: registry.k8s.io/pause:3.10
        resources: {requests: {cpu: 100m}, claims: [{name: gpu}]}
`, ns, name, app, opt, defragNodeLabel)
}

// labelDefragNode sets (on) or removes the defragmentation test's label on a node.
func labelDefragNode(ctx context.Context, node string, on bool) error {
	value := "null"
	if on {
		value = `"yes"`
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, defragNodeLabel, value)
	_, err := client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// deploymentPod is the running pod of a one-replica Deployment (not terminating).
func deploymentPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "name=" + name})
	if err != nil {
		return nil, err
	}
	for k := range pods.Items {
		p := &pods.Items[k]
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" {
			return p, nil
		}
	}
	return nil, fmt.Errorf("deployment %s has no running pod", name)
}

// TestDefragmentationMakesRoomForAGang: four 4-GPU nodes each run a half-GPU share, two of
// them opted in to moves (movable-a, movable-b) and two not; a third opted-in share
// (movable-e) runs beside one of the others. A PodDisruptionBudget over the three opted-in
// pods keeps one of them running (two disruptions allowed), and an 8-GPU gang of two 4-GPU
// pods fits nowhere. `gpudra defrag plan` names moves of opted-in pods only; with the
// Defragmentation gate on (the lab turns every gate on) the controller moves them: the
// budget holds throughout, the evicted pods run again, the gang is admitted and runs, and
// the pods without the opt-in are never touched.
func TestDefragmentationMakesRoomForAGang(t *testing.T) {
	inLane(t, clusterLane)
	requireTrainingBlock(t)
	ns := namespace(t, "e2e-defrag")
	nodes := []string{"t1-n1", "t1-n2", "t1-n3", "t1-n4"}
	t.Cleanup(func() {
		for _, n := range nodes {
			if err := labelDefragNode(context.Background(), n, false); err != nil {
				t.Errorf("clean up node %s: %v", n, err)
			}
		}
	})
	apply(t, quotaTemplate(ns, "half", `{name: gpu, exactly: {deviceClassName: gpu-share.gpudra.dev, capacity: {requests: {memory: 8Gi, compute: "50"}}}}`)+
		quotaTemplate(ns, "four", `{name: gpus, exactly: {deviceClassName: gpu.gpudra.dev, count: 4}}`)+`
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: movable, namespace: `+ns+`}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: movable}}
`)
	// Each Deployment is created while only its node carries the label.
	shares := []struct {
		name    string
		node    int
		movable bool
	}{{"movable-a", 0, true}, {"movable-b", 1, true}, {"fixed-c", 2, false}, {"movable-e", 2, true}, {"fixed-d", 3, false}}
	fixed, movable := map[string]types.UID{}, map[string]types.UID{}
	for _, s := range shares {
		for k, n := range nodes {
			if err := labelDefragNode(t.Context(), n, k == s.node); err != nil {
				t.Fatal(err)
			}
		}
		app := "fixed"
		if s.movable {
			app = "movable"
		}
		apply(t, shareDeployment(ns, s.name, app, s.movable))
		eventually(t, 2*time.Minute, s.name+" runs on "+nodes[s.node], func(ctx context.Context) error {
			p, err := deploymentPod(ctx, ns, s.name)
			if err != nil {
				return err
			}
			if p.Spec.NodeName != nodes[s.node] {
				return fmt.Errorf("on %s", p.Spec.NodeName)
			}
			if s.movable {
				movable[s.name] = p.UID
			} else {
				fixed[s.name] = p.UID
			}
			return nil
		})
	}
	for _, n := range nodes {
		if err := labelDefragNode(t.Context(), n, true); err != nil {
			t.Fatal(err)
		}
	}

	applyForTest(t, decode(t, clusterQueue("e2e-defrag", true, 16, 8))...)
	apply(t, teamQueue(ns, "e2e-defrag")+fmt.Sprintf(`
---
apiVersion: batch/v1
kind: Job
metadata:
  name: big
  namespace: %s
  labels: {kueue.x-k8s.io/queue-name: team}
spec:
  parallelism: 2
  completions: 2
  completionMode: Indexed
  template:
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 0
      schedulingGates: [{name: gpudra.dev/placement}]
      nodeSelector: {%s: "yes"}
      resourceClaims: [{name: gpus, resourceClaimTemplateName: four}]
      containers:
      - name: worker
        image: registry.k8s.io/pause:3.10
        resources: {requests: {cpu: "1"}, claims: [{name: gpus}]}
`, ns, defragNodeLabel))

	var wlName string
	eventually(t, 2*time.Minute, "the gang waits: the topology check answers Retry", func(ctx context.Context) error {
		wl, err := workloadOfJob(ctx, ns, "big")
		if err != nil {
			return err
		}
		wlName = wl.Name
		for _, s := range wl.Status.AdmissionChecks {
			if s.State == kueue.CheckStateRetry {
				return nil
			}
		}
		// Kueue evicts a Workload whose check answers Retry and queues it again.
		if ev := apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadEvicted); ev != nil && ev.Reason == kueue.WorkloadEvictedByAdmissionCheck {
			return nil
		}
		return fmt.Errorf("checks %+v", wl.Status.AdmissionChecks)
	})

	// The plan for the waiting gang, unless the controller has carried it out already
	// (it plans once a minute): then a movable pod was evicted and none is left to move.
	checkPlan(t, ns, func(ctx context.Context) bool {
		for name, uid := range movable {
			if p, err := deploymentPod(ctx, ns, name); err != nil || p.UID != uid {
				return true
			}
		}
		return false
	}, "--for", "workload/"+wlName)

	// Until the gang runs: the budget holds (a movable pod always runs) and the pods
	// without the opt-in keep running, untouched.
	budgetBroken := 0
	eventually(t, 6*time.Minute, "the gang runs on room defragmentation made", func(ctx context.Context) error {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=movable"})
		if err != nil {
			return err
		}
		ready := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				ready++
			}
		}
		if ready < 1 {
			budgetBroken++
		}
		for name, uid := range fixed {
			p, err := deploymentPod(ctx, ns, name)
			if err != nil || p.UID != uid {
				return fmt.Errorf("pod %s without the opt-in was moved (%v)", name, err)
			}
		}
		gang, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=big"})
		if err != nil {
			return err
		}
		running := 0
		for _, p := range gang.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				running++
			}
		}
		if running < 2 {
			return fmt.Errorf("%d of 2 gang pods run", running)
		}
		return nil
	})
	if budgetBroken > 0 {
		t.Errorf("the PodDisruptionBudget (minAvailable 1) was broken: no movable pod ran at %d polls", budgetBroken)
	}
	for name, uid := range fixed {
		if p, err := deploymentPod(t.Context(), ns, name); err != nil || p.UID != uid {
			t.Errorf("pod %s without the opt-in was moved (%v)", name, err)
		}
	}
	eventually(t, 2*time.Minute, "the evicted pods run again on the labelled nodes", func(ctx context.Context) error {
		for name := range movable {
			p, err := deploymentPod(ctx, ns, name)
			if err != nil {
				return err
			}
			if !slices.Contains(nodes, p.Spec.NodeName) {
				return fmt.Errorf("%s runs on %s", name, p.Spec.NodeName)
			}
		}
		return nil
	})
}

// checkPlan runs `gpudra defrag plan ARGS -n ns -o json` and checks that it finds moves,
// of the namespace's opted-in pods (movable-*) only. done, unless nil, says that the plan
// was carried out already, in which case no moves are expected.
func checkPlan(t *testing.T, ns string, done func(context.Context) bool, args ...string) {
	t.Helper()
	args = append(append([]string{"defrag", "plan"}, args...), "-n", ns, "-o", "json", "--kubeconfig", lab.Layout{Root: state.Dir}.Kubeconfig())
	out, err := exec.CommandContext(t.Context(), gpudraCLI, args...).Output()
	if err != nil {
		t.Fatalf("gpudra %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var plan defrag.Result
	if err := json.Unmarshal(out, &plan); err != nil {
		t.Fatalf("gpudra defrag plan -o json: %v\n%s", err, out)
	}
	if (!plan.Found || len(plan.Moves) == 0) && (done == nil || !done(t.Context())) {
		t.Errorf("gpudra %s moves nothing: %s", strings.Join(args[:3], " "), out)
	}
	for _, m := range plan.Moves {
		for _, p := range m.Pods {
			if !strings.HasPrefix(p.Pod, ns+"/movable-") {
				t.Errorf("the plan moves %s, which did not opt in: %s", p.Pod, out)
			}
		}
	}
}

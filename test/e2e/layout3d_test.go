//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpudra/gpudra/lab"
)

// The training block's ToRs (deployments/lab/e2e.yaml): rack-t1 behind tor-t1, oversubscribed
// 3:1; rack-t2 behind two non-blocking ToRs of two hosts each.
const (
	torT1  = "block-t/rack-t1/tor-t1"
	torT2a = "block-t/rack-t2/tor-t2a"
	torT2b = "block-t/rack-t2/tor-t2b"
)

// slicedJob is an Indexed Job of one-GPU pods (claim template one-gpu) on the training
// block; annotations are the pod template's (none: no gpudra layout, no scheduling gate).
func slicedJob(name, ns, queue string, pods int, annotations string) string {
	meta, gate := "", ""
	if annotations != "" {
		meta = "\n    metadata:\n      annotations: {" + annotations + "}"
		gate = "\n      schedulingGates: [{name: gpudra.dev/placement}]"
	}
	return fmt.Sprintf(`
apiVersion: batch/v1
kind: Job
metadata:
  name: %[1]s
  namespace: %[2]s
  labels: {kueue.x-k8s.io/queue-name: %[3]s}
spec:
  parallelism: %[4]d
  completions: %[4]d
  completionMode: Indexed
  template:%[5]s
    spec:
      restartPolicy: Never%[6]s
      nodeSelector: {%[7]s: hgx-a100-4gpu}
      resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
      containers:
      - name: worker
        image: registry.k8s.io/pause:3.10
        resources:
          requests: {cpu: 100m}
          claims: [{name: gpu}]
`, name, ns, queue, pods, meta, gate, lab.LabelProfile)
}

// threeDLayout: 2-way data × 4-way pipeline × 4-way tensor parallelism as 32 one-GPU pods,
// tensor-parallel groups of 4 per host inside pipelines of 16 kept under one ToR by the
// ToR rule, all in one block.
const threeDLayout = `gpudra.dev/required-topology: block, gpudra.dev/slice-size: "16", gpudra.dev/slice-topology: tor, ` +
	`gpudra.dev/subslice-size: "4", gpudra.dev/subslice-required-topology: hostname`

// nodesByIndex waits for the job's pods to run and returns each one's node by completion index.
func nodesByIndex(t *testing.T, ns, job string, pods int) []string {
	t.Helper()
	eventually(t, 4*time.Minute, fmt.Sprintf("%s: all %d workers run", job, pods), jobRuns(ns, job, pods))
	list, err := client.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, pods)
	for _, p := range list.Items {
		idx, err := strconv.Atoi(p.Annotations["batch.kubernetes.io/job-completion-index"])
		if err != nil || idx >= pods || p.DeletionTimestamp != nil {
			continue
		}
		out[idx] = p.Spec.NodeName
	}
	return out
}

// nodeToR names a lab node's ToR as the check does: block/rack/tor.
func nodeToR(node string) string {
	for _, n := range state.Nodes {
		if n.Name == node {
			return n.Block + "/" + n.Rack + "/" + n.ToR
		}
	}
	return ""
}

// checkMessage is the gpudra check's state and message on the Job's Workload ("" while
// there is none).
func checkMessage(ctx context.Context, ns, job string) (string, string, error) {
	wls, err := dyn().Resource(workloadsGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", "", err
	}
	for _, u := range wls.Items {
		for _, o := range u.GetOwnerReferences() {
			if o.Kind != "Job" || o.Name != job {
				continue
			}
			checks, _, _ := unstructured.NestedSlice(u.Object, "status", "admissionChecks")
			for _, c := range checks {
				m, _ := c.(map[string]any)
				if m["name"] == topologyCheck {
					st, _ := m["state"].(string)
					msg, _ := m["message"].(string)
					return st, msg, nil
				}
			}
		}
	}
	return "", "", nil
}

// removeJob deletes the Job and waits until its claims are gone.
func removeJob(t *testing.T, ns, job string) {
	t.Helper()
	deleteJobNow(t, ns, job)
	eventually(t, 2*time.Minute, job+": its claims are gone", noClaimsLeft(ns))
}

// noClaimsLeft holds once namespace ns has no ResourceClaim.
func noClaimsLeft(ns string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		cs, err := client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(cs.Items) > 0 {
			return fmt.Errorf("%d claims left", len(cs.Items))
		}
		return nil
	}
}

// layoutQueues makes a namespace with LocalQueue gpudra (ClusterQueue name, with the check)
// and, when plain, LocalQueue plain (name-default, without), and the one-gpu claim template.
func layoutQueues(t *testing.T, name string, plain bool) string {
	t.Helper()
	queues := clusterQueue(name, true, 64, 32)
	if plain {
		queues += "---\n" + clusterQueue(name+"-default", false, 64, 32)
	}
	applyForTest(t, decode(t, queues)...)
	ns := namespace(t, name)
	local := `
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: gpudra, namespace: ` + ns + `}
spec: {clusterQueue: ` + name + `}
`
	if plain {
		local += `---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: plain, namespace: ` + ns + `}
spec: {clusterQueue: ` + name + `-default}
`
	}
	apply(t, local+oneGPUTemplate(ns))
	return ns
}

// TestThreeDParallelOneGPUPods runs the 3D-parallel job as teams lay it out — 32 one-GPU
// pods, the 4 tensor-parallel workers of a group on one host, the 4 stages of a pipeline
// under one ToR where the ToR's uplinks are oversubscribed — on the training block, once
// through the gpudra check and once through Kueue and kube-scheduler alone, and checks the
// layout pod by pod.
func TestThreeDParallelOneGPUPods(t *testing.T) {
	inLane(t, clusterLane)
	requireTrainingBlock(t)
	ns := layoutQueues(t, "e2e-3d1", true)

	apply(t, slicedJob("train-3d1-gpudra", ns, "gpudra", 32, threeDLayout))
	start := time.Now()
	nodes := nodesByIndex(t, ns, "train-3d1-gpudra", 32)
	took := time.Since(start).Round(time.Second)
	check, msg, err := checkMessage(t.Context(), ns, "train-3d1-gpudra")
	if err != nil {
		t.Fatal(err)
	}
	for pod, node := range nodes {
		if first := nodes[pod/4*4]; node != first {
			t.Errorf("pod %d (tensor-parallel group %d) on %s, the group's first pod on %s", pod, pod/4, node, first)
		}
		// Pipeline 0 fits under tor-t1, whose uplinks are oversubscribed: it must stay there.
		// Pipeline 1 has no ToR of 4 hosts left and spans rack-t2's two non-blocking ToRs.
		switch tor := nodeToR(node); {
		case pod < 16 && tor != torT1:
			t.Errorf("pod %d (pipeline 0) under %s, want %s", pod, tor, torT1)
		case pod >= 16 && tor != torT2a && tor != torT2b:
			t.Errorf("pod %d (pipeline 1) under %s, want rack-t2's ToRs", pod, tor)
		}
	}
	for _, want := range []string{
		"slices of 16 kept under one ToR (required: " + torT1 + " uplinks oversubscribed 3:1)",
		"slice 1 spans " + torT2a + ", " + torT2b + ": one ToR only preferred, their ToRs are non-blocking",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("check %s: message %q does not say %q", check, msg, want)
		}
	}
	t.Logf("with gpudra: %d pods running %s after submission; the check said: %s", len(nodes), took, msg)
	removeJob(t, ns, "train-3d1-gpudra")

	apply(t, slicedJob("train-3d1-default", ns, "plain", 32, ""))
	plain := nodesByIndex(t, ns, "train-3d1-default", 32)
	groups, pipelines := 0, 0
	for g := range 8 {
		if same(plain[g*4 : g*4+4]) {
			groups++
		}
	}
	if tors := distinct(plain[:16], nodeToR); len(tors) == 1 && tors[0] == torT1 {
		pipelines++
	}
	t.Logf("same job, same run: gpudra kept 8/8 tensor-parallel groups on one host and pipeline 0 under %s; "+
		"Kueue + kube-scheduler alone kept %d/8 groups on one host, pipeline 0 under %v", torT1, groups, distinct(plain[:16], nodeToR))
	if groups == 8 && pipelines == 1 {
		t.Errorf("Kueue and kube-scheduler alone matched the layout (%v): the comparison shows nothing", plain)
	}
	removeJob(t, ns, "train-3d1-default")
}

// TestToRRuleOnATwoToRRack shows the ToR rule on the training block: pipelines that fit
// under one ToR stay there, as a requirement under tor-t1 (3:1) and as a preference under
// rack-t2's non-blocking ToRs; a pipeline of 5 hosts, which no ToR holds and which may not
// leave tor-t1 because of its oversubscription, waits with the reason.
func TestToRRuleOnATwoToRRack(t *testing.T) {
	inLane(t, clusterLane)
	requireTrainingBlock(t)
	ns := layoutQueues(t, "e2e-tor", false)
	pipelines := `gpudra.dev/required-topology: block, gpudra.dev/slice-size: "8", gpudra.dev/slice-topology: tor, ` +
		`gpudra.dev/subslice-size: "4", gpudra.dev/subslice-required-topology: hostname`

	apply(t, slicedJob("tor-fits", ns, "gpudra", 24, pipelines))
	nodes := nodesByIndex(t, ns, "tor-fits", 24)
	for p := range 3 {
		if tors := distinct(nodes[p*8:p*8+8], nodeToR); len(tors) != 1 {
			t.Errorf("pipeline %d (pods %d-%d) under ToRs %v, want one", p, p*8, p*8+7, tors)
		}
	}
	_, msg, err := checkMessage(t.Context(), ns, "tor-fits")
	if err != nil {
		t.Fatal(err)
	}
	want := "slices of 8 kept under one ToR (required: " + torT1 + " uplinks oversubscribed 3:1; preferred: " + torT2a + " non-blocking)"
	if !strings.Contains(msg, want) {
		t.Errorf("message %q does not say %q", msg, want)
	}
	removeJob(t, ns, "tor-fits")

	big := strings.Replace(pipelines, `slice-size: "8"`, `slice-size: "20"`, 1)
	apply(t, slicedJob("tor-too-big", ns, "gpudra", 20, big))
	want = "slices must each stay under one ToR where its uplinks are oversubscribed: " + torT1 + " 3:1"
	// Kueue sets the check back to Pending when it requeues; the Event stays.
	eventually(t, 2*time.Minute, "tor-too-big: the check answers Retry with the ToR rule",
		hasEvent(ns, "Workload", "tor-too-big", "Warning", "GangDoesNotFit", want))
	if err := noPodRuns(ns, "tor-too-big")(t.Context()); err != nil {
		t.Error(err)
	}
	removeJob(t, ns, "tor-too-big")
}

func same(nodes []string) bool {
	for _, n := range nodes {
		if n != nodes[0] {
			return false
		}
	}
	return true
}

// distinct lists the distinct values of f over nodes, in order of first appearance.
func distinct(nodes []string, f func(string) string) []string {
	var out []string
	seen := map[string]bool{}
	for _, n := range nodes {
		if v := f(n); !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

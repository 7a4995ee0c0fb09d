//go:build e2e

package e2e

import (
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpudra/gpudra/lab"
)

// TestThreeDParallelJob runs the seed's job — 2-way data × 4-way tensor × 4-way pipeline
// parallel = 32 GPU workers as 8 pods of one 4-GPU tensor-parallel group each — on the
// training block (two racks of four HGX A100 4-GPU nodes), once through a ClusterQueue with
// the gpudra.dev/topology check and once through one without (what Kueue and kube-scheduler
// do alone), and reports for both how many pipelines stay inside one rack. With gpudra every
// pipeline must; without, it is left to chance.
func TestThreeDParallelJob(t *testing.T) {
	inLane(t, clusterLane)
	requireTrainingBlock(t)
	applyForTest(t, decode(t, clusterQueue("e2e-3d", true, 64, 32)+"---\n"+clusterQueue("e2e-3d-default", false, 64, 32))...)
	ns := namespace(t, "e2e-3d")
	apply(t, `
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: gpudra, namespace: `+ns+`}
spec: {clusterQueue: e2e-3d}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: plain, namespace: `+ns+`}
spec: {clusterQueue: e2e-3d-default}
`+fourGPUTemplate("tensor-parallel-4", ns))
	run := func(name, queue string, gpudra bool) (inOneRack, nodes int) {
		t.Helper()
		meta, gate := "", ""
		if gpudra {
			meta = `
    metadata:
      annotations:
        gpudra.dev/required-topology: block
        gpudra.dev/slice-size: "4"
        gpudra.dev/slice-required-topology: rack`
			gate = `
      schedulingGates: [{name: gpudra.dev/placement}]`
		}
		apply(t, `
apiVersion: batch/v1
kind: Job
metadata:
  name: `+name+`
  namespace: `+ns+`
  labels: {kueue.x-k8s.io/queue-name: `+queue+`}
spec:
  parallelism: 8
  completions: 8
  completionMode: Indexed
  template:`+meta+`
    spec:
      restartPolicy: Never`+gate+`
      nodeSelector: {`+lab.LabelProfile+`: hgx-a100-4gpu}
      resourceClaims: [{name: tp, resourceClaimTemplateName: tensor-parallel-4}]
      containers:
      - name: worker
        image: registry.k8s.io/pause:3.10
        resources:
          requests: {cpu: "1"}
          claims: [{name: tp}]
`)
		start := time.Now()
		eventually(t, 4*time.Minute, name+": all 8 workers run", jobRuns(ns, name, 8))
		pods, err := client.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "job-name=" + name})
		if err != nil {
			t.Fatal(err)
		}
		racks := map[int]map[string]bool{0: {}, 1: {}}
		used := map[string]bool{}
		for _, p := range pods.Items {
			idx, err := strconv.Atoi(p.Annotations["batch.kubernetes.io/job-completion-index"])
			if err != nil {
				t.Fatalf("pod %s has no completion index", p.Name)
			}
			racks[idx/4][nodeRack(p.Spec.NodeName)] = true
			used[p.Spec.NodeName] = true
		}
		for _, r := range racks {
			if len(r) == 1 {
				inOneRack++
			}
		}
		t.Logf("%s: %d of 2 pipelines inside one rack (%v), 8 tensor-parallel groups on %d nodes, all running %s after submission",
			name, inOneRack, racks, len(used), time.Since(start).Round(time.Second))
		removeJob(t, ns, name)
		return inOneRack, len(used)
	}
	racked, nodes := run("train-3d-gpudra", "gpudra", true)
	if racked != 2 || nodes != 8 {
		t.Errorf("with gpudra: %d of 2 pipelines inside one rack on %d nodes, want 2 and 8", racked, nodes)
	}
	plainRacked, plainNodes := run("train-3d-default", "plain", false)
	t.Logf("same job, same run: gpudra kept %d/2 pipelines in one rack (%d nodes); Kueue + kube-scheduler alone kept %d/2 (%d nodes)",
		racked, nodes, plainRacked, plainNodes)
}

// clusterQueue is a ResourceFlavor and a ClusterQueue of that name with quota for cpu and
// gpus GPUs (gpudra.dev/gpu-percent, 100 per GPU: Kueue charges claims their devices'
// compute capacity through deviceClassMappings), optionally behind the gpudra.dev/topology
// admission check.
func clusterQueue(name string, withCheck bool, cpu, gpus int) string {
	check := ""
	if withCheck {
		check = `
  admissionChecksStrategy:
    admissionChecks: [{name: gpudra-topology}]`
	}
	return `apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: ` + name + `}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: ` + name + `}
spec:
  namespaceSelector: {}` + check + `
  resourceGroups:
  - coveredResources: [cpu, gpudra.dev/gpu-percent]
    flavors:
    - name: ` + name + `
      resources:
      - {name: cpu, nominalQuota: "` + strconv.Itoa(cpu) + `"}
      - {name: gpudra.dev/gpu-percent, nominalQuota: "` + strconv.Itoa(100*gpus) + `"}
`
}

func nodesWithProfile(profile string) int {
	n := 0
	for _, node := range state.Nodes {
		if node.Profile == profile {
			n++
		}
	}
	return n
}

func nodeRack(node string) string {
	for _, n := range state.Nodes {
		if n.Name == node {
			return n.Rack
		}
	}
	return ""
}

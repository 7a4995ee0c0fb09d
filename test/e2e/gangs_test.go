//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpudra/gpudra/lab"
)

// Shared by the tests that run gangs on the e2e lab's training block
// (deployments/lab/e2e.yaml: 2 racks x 4 HGX A100 4-GPU nodes).

// requireTrainingBlock ends a test (labLacks) when the lab has no Kueue or no training block.
func requireTrainingBlock(t *testing.T) {
	t.Helper()
	if !state.Kueue {
		labLacks(t, "Kueue (lab file kueue.enabled: false)")
	}
	if nodesWithProfile("hgx-a100-4gpu") < 8 {
		labLacks(t, "the training block of deployments/lab/e2e.yaml (8 hgx-a100-4gpu nodes)")
	}
}

// fourGPUTemplate is a claim template for one tensor-parallel group: 4 GPUs, no selectors
// or constraints; on a 4-GPU HGX node they are all NVLinked. It starts a new YAML document,
// so it can follow other manifests.
func fourGPUTemplate(name, ns string) string {
	return quotaTemplate(ns, name, `{name: tp, exactly: {deviceClassName: gpu.gpudra.dev, count: 4}}`)
}

// gatedGang is an Indexed Job of pods that each take one fourGPUTemplate claim on the
// training block, kept in one block, pinned by gpudra through its scheduling gate.
// jobLabels are extra labels, e.g. "kueue.x-k8s.io/priority-class: high".
func gatedGang(name, ns, queue, template string, pods int, jobLabels string) string {
	return blockGangJob(name, ns, queue, pods, jobLabels, "resourceClaims: [{name: tp, resourceClaimTemplateName: "+template+"}]", "claims: [{name: tp}]")
}

// blockGangJob is an Indexed Job of pods on the training block, kept in one block, pinned
// by gpudra through its scheduling gate; podSpec is one more line of the pod spec and
// resources one more line of the worker's resources (how the pods ask for GPUs).
func blockGangJob(name, ns, queue string, pods int, jobLabels, podSpec, resources string) string {
	if jobLabels != "" {
		jobLabels = ", " + jobLabels
	}
	if podSpec != "" {
		podSpec = "\n      " + podSpec
	}
	return fmt.Sprintf(`
apiVersion: batch/v1
kind: Job
metadata:
  name: %s
  namespace: %s
  labels: {kueue.x-k8s.io/queue-name: %s%s}
spec:
  parallelism: %d
  completions: %d
  completionMode: Indexed
  template:
    metadata:
      annotations: {gpudra.dev/required-topology: block}
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 0
      schedulingGates: [{name: gpudra.dev/placement}]
      nodeSelector: {%s: hgx-a100-4gpu}%s
      containers:
      - name: worker
        image: registry.k8s.io/pause:3.10
        resources:
          requests: {cpu: "1"}
          %s
`, name, ns, queue, jobLabels, pods, pods, lab.LabelProfile, podSpec, resources)
}

// noPodRuns: none of the job's pods runs (a preempted gang is gone as a whole).
func noPodRuns(ns, job string) func(context.Context) error {
	return func(ctx context.Context) error {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				return fmt.Errorf("pod %s of job %s still runs", p.Name, job)
			}
		}
		return nil
	}
}

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/internal/explain"
	"github.com/gpudra/gpudra/lab"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

var trainJobsGVR = schema.GroupVersionResource{Group: "trainer.kubeflow.org", Version: "v1alpha1", Resource: "trainjobs"}

// TestTrainJobWorkersInOneRack: a TrainJob of Kubeflow Trainer (the lab's torch-distributed
// ClusterTrainingRuntime) through a LocalQueue behind the gpudra check, 4 nodes that each ask
// for one 4-GPU NVLink group (resourcesPerNode), required in one rack. The rack annotation,
// the placement gate and the node selector come in a runtime patch, which Kueue merges into
// the pod set of the runtime's replicated job "node". The check admits the TrainJob, Trainer
// runs it as a JobSet, and each pod runs on the node the check planned for its completion
// index, all four in one rack. `gpudra explain trainjob/NAME` shows the Workload passed the
// check.
func TestTrainJobWorkersInOneRack(t *testing.T) {
	inLane(t, clusterLane)
	requireJobSet(t)
	if _, err := dyn().Resource(trainJobsGVR).List(t.Context(), metav1.ListOptions{Limit: 1}); apierrors.IsNotFound(err) {
		labLacks(t, "Kubeflow Trainer's TrainJob (lab file kueue.jobKinds: [jobset, trainjob])")
	}
	const nodes = 4
	applyForTest(t, decode(t, clusterQueue("e2e-trainjob", true, 16, 4*nodes))...)
	ns := namespace(t, "e2e-trainjob")
	const name = "train-trainjob"
	apply(t, fmt.Sprintf(`
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: gpudra, namespace: %[1]s}
spec: {clusterQueue: e2e-trainjob}
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: %[2]s
  namespace: %[1]s
  labels: {kueue.x-k8s.io/queue-name: gpudra}
spec:
  suspend: true
  runtimeRef: {name: torch-distributed}
  trainer:
    numNodes: %[3]d
    image: registry.k8s.io/pause:3.10
    resourcesPerNode:
      requests: {cpu: "1"}
      limits: {gpudra.dev/nvlink-group-4: 1}
  runtimePatches:
  - manager: gpudra.dev/e2e
    trainingRuntimeSpec:
      template:
        spec:
          replicatedJobs:
          - name: node
            template:
              spec:
                template:
                  metadata:
                    annotations: {%[4]s: rack}
                  spec:
                    schedulingGates: [{name: gpudra.dev/placement}]
                    nodeSelector: {%[5]s: hgx-a100-4gpu}
`, ns, name, nodes, api.AnnotationRequiredTopology, lab.LabelProfile))
	start := time.Now()
	eventually(t, 2*time.Minute, name+": the gpudra check admits its Workload", func(ctx context.Context) error {
		wls, err := dyn().Resource(workloadsGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, u := range wls.Items {
			var wl kueue.Workload
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &wl); err != nil {
				return err
			}
			if !explain.OwnedBy(&wl, explain.TrainJob, name) {
				continue
			}
			if len(wl.Spec.PodSets) != 1 || wl.Spec.PodSets[0].Name != "node" || wl.Spec.PodSets[0].Count != nodes {
				return fmt.Errorf("workload %s has pod sets %v, want node of %d pods", wl.Name, podSetNames(&wl), nodes)
			}
			if got := wl.Spec.PodSets[0].Template.Annotations[api.AnnotationRequiredTopology]; got != "rack" {
				return fmt.Errorf("workload %s: pod set node has %s=%q, want the runtime patch's rack", wl.Name, api.AnnotationRequiredTopology, got)
			}
			for _, c := range wl.Status.AdmissionChecks {
				if c.Name == "gpudra-topology" && c.State == kueue.CheckStateReady {
					return nil
				}
			}
			return fmt.Errorf("workload %s: checks %+v", wl.Name, wl.Status.AdmissionChecks)
		}
		return fmt.Errorf("no Kueue workload for TrainJob %s yet", name)
	})
	selector := "jobset.sigs.k8s.io/jobset-name=" + name
	racks := allRunPinned(t, ns, selector, "jobset.sigs.k8s.io/replicatedjob-name", map[string]int{"node": nodes}, "node")
	if len(racks) != 1 {
		t.Errorf("nodes run in racks %v, want one", racks)
	}
	// Per plan: the node of completion index i runs on slot i of the plan.
	pods, err := client.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		plan := strings.Split(p.Annotations[api.AnnotationPlacement], ",")
		index, slot := p.Annotations["batch.kubernetes.io/job-completion-index"], p.Labels[api.LabelPinnedSlot]
		if index != slot {
			t.Errorf("pod %s of completion index %q pinned to slot %q", p.Name, index, slot)
		}
		if len(plan) != nodes || !strings.Contains(","+strings.Join(plan, ",")+",", ","+p.Spec.NodeName+",") {
			t.Errorf("pod %s runs on %s, outside the plan %v", p.Name, p.Spec.NodeName, plan)
		}
	}
	t.Logf("%s: admitted and all %d pods running %s after submission, in rack %v", name, nodes, time.Since(start).Round(time.Second), racks)
	out, err := exec.CommandContext(t.Context(), gpudraCLI, "explain", "trainjob/"+name, "-n", ns, "--kubeconfig", lab.Layout{Root: state.Dir}.Kubeconfig()).CombinedOutput()
	if want := "check gpudra-topology: Ready"; err != nil || !strings.Contains(string(out), want) {
		t.Errorf("gpudra explain trainjob/%s (%v) lacks %q:\n%s", name, err, want, out)
	}
	if err := dyn().Resource(trainJobsGVR).Namespace(ns).Delete(t.Context(), name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		t.Errorf("delete TrainJob %s: %v", name, err)
	}
}

func podSetNames(wl *kueue.Workload) []string {
	var out []string
	for _, ps := range wl.Spec.PodSets {
		out = append(out, fmt.Sprintf("%s×%d", ps.Name, ps.Count))
	}
	return out
}

// Kueue sets up its integration of every job kind the lab runs as it starts, because the
// lab serves the kinds' CRDs first: an integration Kueue defers is polled for with a backoff
// that grows to 2 minutes, and until it is set up Kueue's webhook refuses the kind's jobs
// (a TrainJob with "unsupported runtime"), a wait that grew past the lab's start-up timeout
// on a busy machine.
func TestKueueSetsUpEveryJobKindAtStart(t *testing.T) {
	inLane(t, clusterLane)
	if !state.Kueue {
		labLacks(t, "Kueue (lab file kueue.enabled)")
	}
	data, err := os.ReadFile(lab.Layout{Root: state.Dir}.Log("kueue"))
	if err != nil {
		t.Fatal(err)
	}
	started := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, "deferring setting up controller") {
			t.Errorf("Kueue deferred a job kind's integration: %s", line)
		}
		started = started || strings.Contains(line, "Starting Controller")
	}
	if !started {
		t.Fatalf("%s shows no controller started; is it Kueue's log?", lab.Layout{Root: state.Dir}.Log("kueue"))
	}
}

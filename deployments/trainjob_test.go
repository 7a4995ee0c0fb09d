package deployments_test

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// The TrainJob sample names the runtime the lab applies (torch-distributed, whose one
// replicated job is node) and patches that replicated job's pods with the rack requirement
// and the placement gate, which is where Kueue reads them from: a patch of a replicated job
// the runtime lacks is refused by Trainer, and pods without the gate are never pinned.
func TestTrainJobSamplePatchesTheRuntimesNodes(t *testing.T) {
	jobs := samplesOf[trainJob](t, "kueue/70-trainjob.yaml", "TrainJob")
	if len(jobs) != 1 {
		t.Fatalf("kueue/70-trainjob.yaml has %d TrainJobs, want 1", len(jobs))
	}
	tj := jobs[0]
	if tj.Spec.RuntimeRef.Name != "torch-distributed" {
		t.Errorf("runtimeRef %q, want torch-distributed", tj.Spec.RuntimeRef.Name)
	}
	if tj.Metadata.Labels["kueue.x-k8s.io/queue-name"] == "" {
		t.Error("no kueue.x-k8s.io/queue-name label: Kueue would not queue it")
	}
	patched := false
	for _, p := range tj.Spec.RuntimePatches {
		for _, rj := range p.TrainingRuntimeSpec.Template.Spec.ReplicatedJobs {
			if rj.Name != "node" {
				t.Errorf("runtime patch of replicated job %q, which torch-distributed lacks", rj.Name)
				continue
			}
			pod := rj.Template.Spec.Template
			if pod.Metadata.Annotations[api.AnnotationRequiredTopology] != "rack" {
				t.Errorf("replicated job node: %s=%q, want rack", api.AnnotationRequiredTopology, pod.Metadata.Annotations[api.AnnotationRequiredTopology])
			}
			if !slices.Contains(pod.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: api.SchedulingGate}) {
				t.Errorf("replicated job node: scheduling gates %v lack %s", pod.Spec.SchedulingGates, api.SchedulingGate)
			}
			patched = true
		}
	}
	if !patched {
		t.Error("no runtime patch of replicated job node")
	}
}

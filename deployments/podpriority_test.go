package deployments_test

import (
	"os"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	sigsyaml "sigs.k8s.io/yaml"
)

// samplesOf decodes the documents of kind in a sample file into T.
func samplesOf[T any](t *testing.T, file, kind string) []T {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []T
	r := yaml.NewYAMLReader(bufioReader(data))
	for {
		doc, err := r.Read()
		if err != nil {
			break
		}
		var meta struct{ Kind string }
		if err := sigsyaml.Unmarshal(doc, &meta); err != nil || meta.Kind != kind {
			continue
		}
		var obj T
		if err := sigsyaml.Unmarshal(doc, &obj); err != nil {
			t.Fatalf("%s: %s: %v", file, kind, err)
		}
		out = append(out, obj)
	}
	return out
}

// TestPodPrioritySampleGoesByThePodsClass: the pod-priority sample's Jobs are queued by
// Kueue without a WorkloadPriorityClass, so Kueue takes their priority from their pods'
// PriorityClass; the sample defines those classes, the later Job's class is the higher,
// and the LocalQueue's ClusterQueue in 10-queues.yaml preempts lower priority within
// itself, so the later Job is admitted first and preempts the earlier one.
func TestPodPrioritySampleGoesByThePodsClass(t *testing.T) {
	const file = "kueue/35-pod-priority.yaml"
	values := map[string]int32{}
	for _, pc := range samplesOf[schedulingv1.PriorityClass](t, file, "PriorityClass") {
		values[pc.Name] = pc.Value
	}
	queues := map[string]string{} // team-a/training → its ClusterQueue
	for _, lq := range samplesOf[kueue.LocalQueue](t, "kueue/10-queues.yaml", "LocalQueue") {
		queues[lq.Namespace+"/"+lq.Name] = string(lq.Spec.ClusterQueue)
	}
	preempts := map[string]bool{}
	for _, cq := range samplesOf[kueue.ClusterQueue](t, "kueue/10-queues.yaml", "ClusterQueue") {
		preempts[cq.Name] = cq.Spec.Preemption != nil && cq.Spec.Preemption.WithinClusterQueue == kueue.PreemptionPolicyLowerPriority
	}
	jobs := samplesOf[batchv1.Job](t, file, "Job")
	if len(jobs) != 2 {
		t.Fatalf("%d Jobs in %s, want a low-priority one and a later high-priority one", len(jobs), file)
	}
	var prio []int32
	for _, j := range jobs {
		if c, ok := j.Labels["kueue.x-k8s.io/priority-class"]; ok {
			t.Errorf("job %s names WorkloadPriorityClass %s, which would win over its pods' PriorityClass", j.Name, c)
		}
		queue := j.Namespace + "/" + j.Labels["kueue.x-k8s.io/queue-name"]
		cq, ok := queues[queue]
		if !ok {
			t.Errorf("job %s: LocalQueue %s is not in 10-queues.yaml", j.Name, queue)
		} else if !preempts[cq] {
			t.Errorf("job %s: ClusterQueue %s does not preempt withinClusterQueue: LowerPriority", j.Name, cq)
		}
		class := j.Spec.Template.Spec.PriorityClassName
		v, ok := values[class]
		if !ok {
			t.Errorf("job %s: its pods' priorityClassName %q is not a PriorityClass of the sample", j.Name, class)
		}
		prio = append(prio, v)
	}
	if len(prio) == 2 && prio[1] <= prio[0] {
		t.Errorf("job %s (priority %d) is not above job %s (priority %d), submitted before it", jobs[1].Name, prio[1], jobs[0].Name, prio[0])
	}
}

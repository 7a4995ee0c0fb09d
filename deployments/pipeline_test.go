package deployments_test

import (
	"os"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/queueing/dependencies"
)

// TestPipelineSampleRunsInOrder: the pipeline sample's Jobs are queued by Kueue, their
// run-after annotations parse, name Jobs of the sample in their namespace and form no
// cycle, so the webhook admits each in the order of the file, gated where it waits.
func TestPipelineSampleRunsInOrder(t *testing.T) {
	data, err := os.ReadFile("kueue/40-pipeline.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := yaml.NewYAMLReader(bufioReader(data))
	created := map[string][]dependencies.Dependency{}
	var order []string
	for {
		doc, err := r.Read()
		if err != nil {
			break
		}
		var job batchv1.Job
		if err := sigsyaml.Unmarshal(doc, &job); err != nil || job.Kind != "Job" {
			continue
		}
		if job.Labels[dependencies.QueueNameLabel] == "" {
			t.Errorf("job %s has no %s: Kueue would not hold it at its gate", job.Name, dependencies.QueueNameLabel)
		}
		spec, ok, err := dependencies.SpecOf(job.Annotations)
		if err != nil {
			t.Errorf("job %s: %v", job.Name, err)
			continue
		}
		for _, d := range spec.After {
			if _, known := created[d.Name]; !known || d.Kind != dependencies.KindJob {
				t.Errorf("job %s runs after %s, which the sample does not create before it", job.Name, d)
			}
		}
		if path := dependencies.Cycle(job.Name, spec.After, created); path != "" {
			t.Errorf("job %s: cycle %s", job.Name, path)
		}
		if ok {
			order = append(order, job.Name)
		}
		created[job.Name] = spec.After
	}
	if len(order) != 2 {
		t.Errorf("jobs that wait for others: %v, want train and evaluate", order)
	}
}

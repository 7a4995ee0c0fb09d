package lab

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/utils/ptr"
	sigsyaml "sigs.k8s.io/yaml"
)

// TestDemoCountsEveryExamplePod: the demo waits for, and reports, as many pods as the
// examples create: each Pod and every worker of each Job (its parallelism), as read with the
// real Job type.
func TestDemoCountsEveryExamplePod(t *testing.T) {
	files, err := filepath.Glob("../deployments/examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	want, jobs := 0, 0
	for _, f := range files {
		for _, doc := range yamlDocs(t, f) {
			var j batchv1.Job
			if err := sigsyaml.Unmarshal(doc, &j); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			switch j.Kind {
			case "Pod":
				want++
			case "Job":
				jobs++
				want += int(ptr.Deref(j.Spec.Parallelism, 1))
			}
		}
	}
	if jobs == 0 {
		t.Fatal("the examples have no Job")
	}
	objs, err := ReadManifests("../deployments/examples")
	if err != nil {
		t.Fatal(err)
	}
	if got := expectedPods(objs); got != want {
		t.Errorf("the demo expects %d example pods, the examples create %d", got, want)
	}
}

// yamlDocs are the non-empty YAML documents of a file.
func yamlDocs(t *testing.T, path string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		if strings.TrimSpace(regexp.MustCompile(`(?m)^#.*$`).ReplaceAllString(d, "")) != "" {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

// TestNextStepsShowTheQueues: after the demo on a lab with Kueue, the next steps say how to
// see the queues and the demo's workloads, and why demo-too-big waits; without Kueue they
// do not mention queues.
func TestNextStepsShowTheQueues(t *testing.T) {
	var out bytes.Buffer
	printNextSteps(&out, &State{Dir: "/lab", Kubectl: "kubectl", Kueue: true})
	for _, want := range []string{"\n  kubectl get clusterqueues,workloads -A\n", " explain job/demo-too-big -n team-b\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("next steps lack %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	printNextSteps(&out, &State{Dir: "/lab", Kubectl: "kubectl"})
	if strings.Contains(out.String(), "clusterqueues") || strings.Contains(out.String(), "demo-too-big") {
		t.Errorf("next steps of a lab without Kueue mention queues:\n%s", out.String())
	}
}

package main

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/yaml"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// -gang 128x8 is 128 nodes in 8 racks of 16 per round, slices of 16 pods; shapes that do not
// fill whole racks, or ask for more GPUs than a node has, are refused naming what is accepted.
func TestGangFlag(t *testing.T) {
	g, err := parseGang("128x8")
	if err != nil || g.nodes() != 128 || g.racks() != 8 || g.sliceSize() != 16 {
		t.Fatalf("128x8: %+v %v: want 128 nodes, 8 racks, slices of 16", g, err)
	}
	if g, err := parseGang("256x4"); err != nil || g.nodes() != 128 || g.sliceSize() != 32 {
		t.Errorf("256x4: %+v %v: want 128 nodes, slices of 32", g, err)
	}
	for in, want := range map[string]string{
		"128":    "want PODSxGPUS",
		"128x16": "GPUs per pod 16: accepted 1, 2, 4, 8",
		"100x8":  "a multiple of 16 pods of 8 GPUs",
		"0x8":    "pods 0",
		"2048x8": "at most 1 024 nodes",
	} {
		if _, err := parseGang(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", in, err, want)
		}
	}
}

// Round A's Job carries the check's annotations and gate and goes to the lab's default
// scheduler; round B's has neither and names the baseline's scheduler. Each selects its
// own node set.
func TestGangJobs(t *testing.T) {
	shape := gangShape{pods: 128, gpus: 8}
	for _, r := range gangRounds {
		var j batchv1.Job
		if err := yaml.UnmarshalStrict([]byte(gangJob(r, shape)), &j); err != nil {
			t.Fatalf("round %s: %v", r.name, err)
		}
		spec := j.Spec.Template.Spec
		ann := j.Spec.Template.Annotations
		if *j.Spec.Parallelism != 128 || *j.Spec.Completions != 128 || *j.Spec.CompletionMode != batchv1.IndexedCompletion {
			t.Errorf("round %s: parallelism %d completions %d mode %s", r.name, *j.Spec.Parallelism, *j.Spec.Completions, *j.Spec.CompletionMode)
		}
		if spec.NodeSelector[api.LabelBlock] != r.set || j.Labels["kueue.x-k8s.io/queue-name"] != "q" {
			t.Errorf("round %s: node selector %v, labels %v", r.name, spec.NodeSelector, j.Labels)
		}
		checked := r.mode == "gpudra"
		if checked != (len(spec.SchedulingGates) == 1 && ann["gpudra.dev/slice-size"] == "16" && ann["gpudra.dev/slice-required-topology"] == "rack") {
			t.Errorf("round %s: gates %v, annotations %v", r.name, spec.SchedulingGates, ann)
		}
		if checked != (spec.SchedulerName == "") || (!checked && spec.SchedulerName != baselineScheduler) {
			t.Errorf("round %s: schedulerName %q", r.name, spec.SchedulerName)
		}
		if !strings.Contains(gangNamespace(r, shape), "count: 8}") || !strings.Contains(gangNamespace(r, shape), "clusterQueue: bench-"+r.mode) {
			t.Errorf("round %s: namespace objects\n%s", r.name, gangNamespace(r, shape))
		}
	}
}

// A slice counts as kept in a rack only when all its pods are bound there.
func TestSlicesInOneRack(t *testing.T) {
	nodeOf := map[int]string{}
	for i := range 8 {
		nodeOf[i] = gangNodeName("s", i/4, i%4) // pods 0-3 in rack 0, 4-7 in rack 1
	}
	if got := slicesInOneRack("s", nodeOf, 8, 4); got != 2 {
		t.Errorf("slices of 4 on racks of 4: %d in one rack, want 2", got)
	}
	if got := slicesInOneRack("s", nodeOf, 8, 8); got != 0 {
		t.Errorf("one slice of 8 over two racks: %d in one rack, want 0", got)
	}
	delete(nodeOf, 7)
	if got := slicesInOneRack("s", nodeOf, 8, 4); got != 1 {
		t.Errorf("a slice with an unbound pod: %d in one rack, want 1", got)
	}
}

// -baseline-first runs round B before round A; the default is A first.
func TestGangOrder(t *testing.T) {
	if o := gangOrder(false); o[0].name != "A" || o[1].name != "B" {
		t.Errorf("default order %s, %s: want A, B", o[0].name, o[1].name)
	}
	if o := gangOrder(true); o[0].name != "B" || o[1].name != "A" {
		t.Errorf("-baseline-first order %s, %s: want B, A", o[0].name, o[1].name)
	}
}

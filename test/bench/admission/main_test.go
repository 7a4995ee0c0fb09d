package main

import (
	"maps"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/yaml"
)

// The gangs decode strictly, as the API server reads them, with the check's annotation and
// gate only in the gpudra queue.
func TestGangsDecode(t *testing.T) {
	for _, mode := range []string{"kueue", "gpudra"} {
		var j batchv1.Job
		if err := yaml.UnmarshalStrict([]byte(job(mode, 7, 4)), &j); err != nil {
			t.Fatalf("%s job: %v", mode, err)
		}
		var w kueue.Workload
		if err := yaml.UnmarshalStrict([]byte(workload(mode, 7, 8)), &w); err != nil {
			t.Fatalf("%s workload: %v", mode, err)
		}
		if *j.Spec.Parallelism != 4 || w.Spec.PodSets[0].Count != 8 || w.Spec.QueueName != "q" {
			t.Errorf("%s: job parallelism %d, workload count %d queue %q", mode, *j.Spec.Parallelism, w.Spec.PodSets[0].Count, w.Spec.QueueName)
		}
		for _, tpl := range []struct {
			what  string
			gates int
			ann   string
			claim string
		}{
			{"job", len(j.Spec.Template.Spec.SchedulingGates), j.Spec.Template.Annotations["gpudra.dev/required-topology"], *j.Spec.Template.Spec.ResourceClaims[0].ResourceClaimTemplateName},
			{"workload", len(w.Spec.PodSets[0].Template.Spec.SchedulingGates), w.Spec.PodSets[0].Template.Annotations["gpudra.dev/required-topology"], *w.Spec.PodSets[0].Template.Spec.ResourceClaims[0].ResourceClaimTemplateName},
		} {
			checked := mode == "gpudra"
			if (tpl.gates == 1) != checked || (tpl.ann == "rack") != checked || tpl.claim != "one-gpu" {
				t.Errorf("%s %s: %d gates, required-topology %q, claim template %q", mode, tpl.what, tpl.gates, tpl.ann, tpl.claim)
			}
		}
	}
}

// -objects picks the rounds; a kind it does not know is refused, naming the accepted ones.
func TestObjectsFlag(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []string
		wantErr string
	}{
		{"workloads,jobs", []string{"workloads", "jobs"}, ""},
		{"jobs", []string{"jobs"}, ""},
		{"jobs, workloads", []string{"jobs", "workloads"}, ""},
		{"pods", nil, `-objects: "pods" is not a kind of round; accepted: workloads, jobs`},
		{"jobs,jobs", nil, `-objects: "jobs" is named twice`},
	} {
		got, err := parseObjects(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: error %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q: %v %v, want %v", tc.in, got, err, tc.want)
		}
	}
}

// Each mode has the first round of one kind and the second of the other, so that a mode's
// ratio is not always that of the later round.
func TestRoundOrderAlternates(t *testing.T) {
	w, j := modesOf("workloads"), modesOf("jobs")
	if len(w) != 2 || len(j) != 2 || w[0] != j[1] || w[1] != j[0] || w[0] == w[1] {
		t.Errorf("workloads rounds %v, jobs rounds %v: want both modes in each, in opposite orders", w, j)
	}
}

// With -whole-gpu-quota count the bench's lab charges whole GPUs by count and its queues
// hold the same GPUs in both resources; by default only in GPU percent.
func TestQueuesAndLabFollowTheWholeGPUQuota(t *testing.T) {
	defer func(q string) { wholeGPUQuota = q }(wholeGPUQuota)
	for _, c := range []struct {
		quota string
		want  map[string]string
	}{
		{"percent", map[string]string{"gpudra.dev/gpu-percent": "1600"}},
		{"count", map[string]string{"gpudra.dev/gpu-percent": "1600", "gpudra.dev/gpu": "16"}},
	} {
		wholeGPUQuota = c.quota
		if f := withWholeGPUQuota(gangLabFile); !strings.Contains(f, "wholeGPUQuota: "+c.quota) {
			t.Errorf("%s: lab file %s", c.quota, f)
		}
		for _, doc := range strings.Split(queues(16), "---\n") {
			var cq kueue.ClusterQueue
			if err := yaml.UnmarshalStrict([]byte(doc), &cq); err != nil {
				t.Fatalf("%s: %v", c.quota, err)
			}
			if cq.Kind != "ClusterQueue" {
				continue
			}
			got := map[string]string{}
			rg := cq.Spec.ResourceGroups[0]
			for _, r := range rg.Flavors[0].Resources {
				if r.Name != "cpu" {
					got[string(r.Name)] = r.NominalQuota.String()
				}
			}
			if len(rg.CoveredResources) != len(got)+1 || !maps.Equal(got, c.want) {
				t.Errorf("%s: ClusterQueue %s covers %v with %v, want %v", c.quota, cq.Name, rg.CoveredResources, got, c.want)
			}
		}
	}
}

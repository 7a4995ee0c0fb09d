package main

import (
	"strings"
	"testing"
	"time"
)

// The report gives each round's throughput and CPU per pod against kube-scheduler on plain
// slices and on the round's own slices.
func TestReportRatios(t *testing.T) {
	results := []result{
		{round: round{"kube-scheduler", "plain"}, pods: 101, span: 2 * time.Second, cpu: 1},
		{round: round{"kube-scheduler", "gpudra"}, pods: 101, span: 4 * time.Second, cpu: 2},
		{round: round{"gpudra-scheduler", "plain"}, pods: 101, span: 2 * time.Second, cpu: 1.1},
		{round: round{"gpudra-scheduler", "gpudra"}, pods: 101, span: 5 * time.Second, cpu: 2.5},
	}
	var b strings.Builder
	report(&b, 100, 101, results)
	want := map[string][]string{
		// pods/s, x plain, x same slices, CPU ms/pod, CPU x same slices
		"kube-scheduler gpudra":   {"25.0", "0.50", "1.00", "20.00", "1.00"},
		"gpudra-scheduler plain":  {"50.0", "1.00", "1.00", "11.00", "1.10"},
		"gpudra-scheduler gpudra": {"20.0", "0.40", "0.80", "25.00", "1.25"},
	}
	for _, line := range strings.Split(b.String(), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		key := f[0] + " " + f[1]
		if w, ok := want[key]; ok {
			if got := f[2:7]; strings.Join(got, " ") != strings.Join(w, " ") {
				t.Errorf("%s: %v, want %v", key, got, w)
			}
			delete(want, key)
		}
	}
	if len(want) > 0 {
		t.Errorf("rows missing from the report %q: %v", b.String(), want)
	}
}

// Without kube-scheduler's rounds there is nothing to compare with.
func TestRatioWithoutBaseline(t *testing.T) {
	if got := ratio(3, 0); got != "n/a" {
		t.Errorf("ratio without a baseline: %q", got)
	}
	if got := (result{pods: 1, cpu: 5}).cpuPerPod(); got != 0 {
		t.Errorf("CPU per pod of one pod: %v, want 0", got)
	}
}

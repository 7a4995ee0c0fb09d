package main

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/driver/simulated"
	"github.com/gpudra/gpudra/lab"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

const streamCSV = `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
cpu-only,1000,10,0,0,,LS,Running,5,100,5
late,1000,10,8,1000,,LS,Running,300,900,300
share,1000,10,1,455,,LS,Running,100,160,100
whole,1000,10,1,1000,,LS,Running,0,30,0
`

func TestStreamTraceKeepsGPUPodsInCreationOrder(t *testing.T) {
	pods, err := parseStreamTrace(strings.NewReader(streamCSV))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods {
		names = append(names, p.name)
	}
	if got := strings.Join(names, ","); got != "whole,share,late" {
		t.Fatalf("GPU pods in creation order: got %s, want whole,share,late (the CPU-only pod skipped)", got)
	}
	if pods[1].milli != 455 || pods[1].lifetime != 60 || pods[2].gpus != 8 {
		t.Fatalf("fields read wrong: %+v", pods)
	}
}

func TestStreamTraceRefusesWhatItCannotRun(t *testing.T) {
	for _, tc := range []struct{ csv, want string }{
		{"name,num_gpu,gpu_milli\na,1,1000\n", `no column "creation_time"`},
		{"name,num_gpu,gpu_milli,creation_time,deletion_time\na,9,1000,0,1\n", "num_gpu 9: accepted 0..8"},
		{"name,num_gpu,gpu_milli,creation_time,deletion_time\na,2,500,0,1\n", "several GPUs must be whole"},
		{"name,num_gpu,gpu_milli,creation_time,deletion_time\na,1,5,0,1\n", "gpu_milli 5: accepted 10..1000"},
		{"name,num_gpu,gpu_milli,creation_time,deletion_time\na,1,x,0,1\n", `gpu_milli "x"`},
		{"name,num_gpu,gpu_milli,creation_time,deletion_time\na,0,0,0,1\n", "no GPU pods"},
	} {
		if _, err := parseStreamTrace(strings.NewReader(tc.csv)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error with %q", tc.csv, err, tc.want)
		}
	}
	if _, err := readStreamTrace("nope"); err == nil || !strings.Contains(err.Error(), "accepted: ") || !strings.Contains(err.Error(), "default") {
		t.Errorf("unknown trace: got %v, want the accepted names", err)
	}
	if _, err := readStreamTrace("multigpu30"); err == nil || !strings.Contains(err.Error(), "no times") {
		t.Errorf("a trace without times: got %v", err)
	}
}

func TestStreamFollowsTheTrace(t *testing.T) {
	pods, err := readStreamTrace("default")
	if err != nil {
		t.Fatal(err)
	}
	p := streamParams{window: 5 * time.Minute, rate: 4, medianRun: 90 * time.Second, gangEvery: 25}
	jobs, err := buildStream(pods, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1200 {
		t.Fatalf("%d jobs, want 5 min × 4/s = 1200", len(jobs))
	}
	if jobs[len(jobs)-1].at != p.window {
		t.Errorf("last arrival at %s, want the window's end %s", jobs[len(jobs)-1].at, p.window)
	}
	var runs []float64
	gangs, shares, multi := 0, 0, 0
	for i, j := range jobs {
		if i > 0 && j.at < jobs[i-1].at {
			t.Fatalf("job %d arrives before job %d", i, i-1)
		}
		if j.run < minRun || j.run > maxRun {
			t.Errorf("%s runs %s, outside [%s, %s]", j.name, j.run, minRun, maxRun)
		}
		runs = append(runs, j.run.Seconds())
		switch {
		case j.gang:
			if i%25 != 24 || j.gpus != 8 || j.pods != streamGangPods[gangs%len(streamGangPods)] {
				t.Errorf("gang %d: %+v", gangs, j)
			}
			gangs++
		case j.pct > 0:
			if j.pct > 99 || j.gpus != 1 || j.demand() != float64(j.pct)/100 || j.baselineGPUs() != 1 {
				t.Errorf("share %+v", j)
			}
			shares++
		case j.gpus > 1:
			multi++
		}
	}
	// The trace's head (pods created months before the rest) does not leave the window
	// empty: arrivals are spread over it.
	if early := slices.IndexFunc(jobs, func(j streamJob) bool { return j.at > p.window/2 }); early < len(jobs)/4 {
		t.Errorf("%d of %d jobs arrive in the first half of the window", early, len(jobs))
	}
	if gangs != 48 || shares == 0 {
		t.Errorf("%d gangs (want 48), %d shares (want some)", gangs, shares)
	}
	// Scaled, not clipped: the median run is what was asked, within the rounding to seconds.
	if m := percentile(runs, 50); math.Abs(m-90) > 1 {
		t.Errorf("median run %.0f s, want 90 s", m)
	}
	// Bursts are kept: the trace creates pods in bursts, so some gaps are far below the mean.
	short := 0
	for i := 1; i < len(jobs); i++ {
		if jobs[i].at-jobs[i-1].at < 50*time.Millisecond {
			short++
		}
	}
	if short < len(jobs)/10 {
		t.Errorf("%d of %d gaps under 50 ms: the trace's bursts were smoothed out", short, len(jobs))
	}
	if o := streamOffered(jobs, 512, p.window); o < 0.3 || o > 5 {
		t.Errorf("offered load %.2f of 4 096 GPUs: the defaults should load the cluster", o)
	}
}

func TestStreamWrapsAShortTraceAndRefusesBadSettings(t *testing.T) {
	pods, err := parseStreamTrace(strings.NewReader(streamCSV))
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := buildStream(pods, streamParams{window: 10 * time.Second, rate: 0.7, medianRun: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 7 || jobs[3].gpus != jobs[0].gpus || jobs[3].at <= jobs[2].at || jobs[6].at != 10*time.Second {
		t.Fatalf("wrapped stream: %+v", jobs)
	}
	for _, tc := range []struct {
		p    streamParams
		want string
	}{
		{streamParams{window: time.Second, rate: 0.1, medianRun: time.Minute}, "fewer than one job"},
		{streamParams{window: time.Hour, rate: 100, medianRun: time.Minute}, "at most 100000"},
		{streamParams{window: time.Minute, rate: 1}, "-stream-median-run"},
		{streamParams{window: time.Minute, rate: 1, medianRun: time.Minute, gangEvery: -1}, "-stream-gang-every"},
	} {
		if _, err := buildStream(pods, tc.p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.p, err, tc.want)
		}
	}
}

func TestStreamManifests(t *testing.T) {
	inv, err := simulated.Inventory("dgx-h100", "n")
	if err != nil {
		t.Fatal(err)
	}
	card := int64(inv.GPUs[0].MemoryBytes)
	jobs := []streamJob{
		{name: "job-00000", pods: 1, gpus: 1, pct: 46},
		{name: "job-00001", pods: 1, gpus: 1, pct: 1},
		{name: "job-00002", pods: 1, gpus: 4},
		{name: "gang-00003", pods: 8, gpus: 8, gang: true},
	}
	for _, r := range streamRounds {
		objs, err := lab.DecodeManifests([]byte(streamNamespace(r, jobs)))
		if err != nil {
			t.Fatalf("round %s: %v", r.name, err)
		}
		templates := map[string]*resourceapi.ResourceClaimTemplate{}
		for _, o := range objs {
			if o.GetKind() != "ResourceClaimTemplate" {
				continue
			}
			data, _ := o.MarshalJSON()
			var tpl resourceapi.ResourceClaimTemplate
			if err := yaml.UnmarshalStrict(data, &tpl); err != nil {
				t.Fatal(err)
			}
			templates[tpl.Name] = &tpl
		}
		for _, j := range jobs {
			tpl := templates[j.template(r.mode)]
			if tpl == nil {
				t.Fatalf("round %s: no template %s for %s", r.name, j.template(r.mode), j.name)
			}
			req := tpl.Spec.Spec.Devices.Requests[0].Exactly
			if j.pct > 0 && r.mode == "gpudra" {
				compute := req.Capacity.Requests[api.CapCompute]
				memory := req.Capacity.Requests[api.CapMemory]
				if req.DeviceClassName != api.DeviceClassShare || compute.Value() != j.pct {
					t.Errorf("share %s: %+v", j.name, req)
				}
				// The check's rule: no larger part of the card's memory than of its compute.
				if memory.Value()*100 > j.pct*card {
					t.Errorf("share %s asks for %s of a %d-byte card with compute %d %%", j.name, memory.String(), card, j.pct)
				}
				continue
			}
			want := int64(j.gpus)
			if req.DeviceClassName != api.DeviceClassGPU || req.Count != want {
				t.Errorf("round %s: %s: %+v, want %d whole GPUs", r.name, j.name, req, want)
			}
		}
		for _, j := range jobs {
			var job batchv1.Job
			if err := yaml.UnmarshalStrict([]byte(streamJobManifest(r, j)), &job); err != nil {
				t.Fatalf("round %s: %s: %v", r.name, j.name, err)
			}
			spec := job.Spec.Template.Spec
			gated := len(spec.SchedulingGates) == 1 && spec.SchedulingGates[0].Name == api.SchedulingGate
			if want := r.mode == "gpudra" && j.gang; gated != want || (job.Spec.Template.Annotations[api.AnnotationRequiredTopology] == "rack") != want {
				t.Errorf("round %s: %s gated %v with annotations %v; want the gate and rack only on the gpudra round's gangs", r.name, j.name, gated, job.Spec.Template.Annotations)
			}
			if (spec.SchedulerName == baselineScheduler) != (r.mode != "gpudra") {
				t.Errorf("round %s: %s scheduler %q", r.name, j.name, spec.SchedulerName)
			}
			if *job.Spec.Parallelism != int32(j.pods) || spec.NodeSelector[api.LabelBlock] != streamBlock || job.Namespace != r.set {
				t.Errorf("round %s: %s: %+v", r.name, j.name, job.Spec)
			}
		}
	}
}

func TestStreamReport(t *testing.T) {
	res := func(r gangRound, lat ...float64) streamResult {
		return streamResult{gangRound: r, submitted: len(lat), admitted: 60, bound: 120, latency: lat, window: time.Minute, createTook: []float64{0.01, 0.02},
			samples: []streamSample{{at: 0, held: 10, served: 5}, {at: time.Minute, held: 30, served: 15, waiting: 2}},
			cpu:     map[string]float64{"kube-apiserver": 3}, peak: map[string]int{"kube-apiserver": 2048}}
	}
	a := res(streamRounds[0], 1, 2, 3, math.Inf(1))
	b := res(streamRounds[1], 2, 4, 6, 8)
	var buf bytes.Buffer
	reportStream(&buf, streamRun{params: streamParams{window: time.Minute, rate: 1, medianRun: time.Minute, gangEvery: 25}, nodes: 16, trace: "default", drain: time.Minute}, 4, []streamResult{a, b})
	got := buf.String()
	for _, want := range []string{
		"| submission → all pods bound, p50 | 2.0 s | 4.0 s |",
		"| submission → all pods bound, p99 | not bound by the end | 8.0 s |",
		"| jobs not bound by the end | 1 (drain 0s) | 0 (drain 0s) |",
		"| Job create (API server and webhooks), p50 / p99 | 0.01 s / 0.02 s | 0.01 s / 0.02 s |",
		"| GPUs held, mean over the window | 20 (16 %) | 20 (16 %) |",
		"| 1 | 30, 2 | 30, 2 |",
		"| kube-apiserver | 3.0 s, 2 MiB | 3.0 s, 2 MiB |",
		"A/B: Workloads admitted per s 1.00×, pods bound per s 1.00×, p50 0.50×, p99 -",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
}

func TestPercentileNearestRank(t *testing.T) {
	v := []float64{5, 1, 4, 2, 3}
	for q, want := range map[float64]float64{50: 3, 99: 5, 0: 1, 20: 1, 21: 2} {
		if got := percentile(v, q); got != want {
			t.Errorf("p%.0f = %g, want %g", q, got, want)
		}
	}
	if !math.IsNaN(percentile(nil, 50)) {
		t.Error("no values: want NaN")
	}
}

// With -stream-share-nodes, round A's first nodes publish shares and the others what
// --publish=training publishes (no shares, still NVLink groups); without it, every node
// publishes shares.
func TestStreamSharePoolPublishesSharesOnItsNodesOnly(t *testing.T) {
	for _, shareNodes := range []int{0, 16} {
		cs := fake.NewClientset()
		if err := publishStreamSlices(t.Context(), cs, 32, "gpudra", shareNodes); err != nil {
			t.Fatal(err)
		}
		rs, err := cs.ResourceV1().ResourceSlices().List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		shares, groups := map[string]bool{}, map[string]bool{}
		for _, s := range rs.Items {
			for _, d := range s.Spec.Devices {
				v := d.Attributes[api.AttrType].StringValue
				switch {
				case v == nil:
				case *v == api.TypeShare:
					shares[*s.Spec.NodeName] = true
				case *v == api.TypeNVLinkGroup:
					groups[*s.Spec.NodeName] = true
				}
			}
		}
		want := 32
		if shareNodes > 0 {
			want = shareNodes
		}
		if len(shares) != want || len(groups) != 32 {
			t.Errorf("-stream-share-nodes %d: %d nodes publish shares (want %d), %d NVLink groups (want 32)", shareNodes, len(shares), want, len(groups))
		}
		if shareNodes > 0 && (!shares[gangNodeName(streamBlock, 0, 0)] || shares[gangNodeName(streamBlock, 1, 0)]) {
			t.Errorf("the share pool is not the first %d nodes: %v", shareNodes, shares)
		}
	}
}

func TestStreamOnlyNamesARound(t *testing.T) {
	err := runStream(t.Context(), streamRun{only: "C"})
	if err == nil || !strings.Contains(err.Error(), "-stream-only") || !strings.Contains(err.Error(), "A or B") {
		t.Fatalf("runStream with -stream-only C: %v, want a refusal naming the flag and A or B", err)
	}
}

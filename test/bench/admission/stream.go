package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpudra/gpudra/data/traces"
	"github.com/gpudra/gpudra/lab"
	"github.com/gpudra/gpudra/sim/reproduction"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// The -stream mode runs a cluster under a stream of mixed jobs for a fixed time, in two
// rounds on one set of kwok nodes (their ResourceSlices replaced between the rounds):
//
//   - Round A (gpudra): the jobs go to a ClusterQueue with the gpudra.dev/topology check;
//     a share is a gpu-share.gpudra.dev claim of the trace's part of one GPU; a gang's pods
//     are kept in one rack and wait for the check to pin them; gpudra-scheduler binds them
//     on gpudra's slices.
//   - Round B (baseline): the same jobs through Kueue alone, kube-scheduler, plain slices;
//     a share takes a whole GPU (what it gets without a sharing driver).
//
// The jobs come from an Alibaba openb trace: its GPU pods in the order they were created,
// each a Job of one pod (a share, or 1–8 whole GPUs), their arrival gaps and run times the
// trace's, scaled to the stream's rate and median run time. The trace has no multi-pod
// jobs, so every gangEvery-th arrival is a training gang instead: an Indexed Job of 2, 4,
// 8 or 16 pods × 8 GPUs in turn. A job runs once all its pods are bound, for its run time;
// then the benchmark deletes it.

// streamBlock is the block of the stream's nodes; both rounds' pods select it.
const streamBlock = "stream"

// streamRounds are the two rounds; each has its namespace (set) and ClusterQueue.
var streamRounds = []gangRound{
	{name: "A", mode: "gpudra", set: "stream-gpudra", slices: "gpudra", scheduler: lab.GpudraScheduler},
	{name: "B", mode: "kueue", set: "stream-plain", slices: "plain", scheduler: lab.KubeScheduler},
}

// streamGangPods are the gangs' sizes, in pods of 8 GPUs, taken in turn.
var streamGangPods = []int{2, 4, 8, 16}

// streamJob is one arrival of the stream.
type streamJob struct {
	name string
	at   time.Duration // arrival, from the round's start
	run  time.Duration // how long it runs once all its pods are bound
	pods int
	gpus int   // whole GPUs per pod; 1 for a share
	pct  int64 // a share's percent of one GPU; 0 for whole GPUs
	gang bool
}

// demand is the job's GPUs as the gpudra round's quota counts them (a share its part).
func (j streamJob) demand() float64 {
	if j.pct > 0 {
		return float64(j.pct) / 100
	}
	return float64(j.pods * j.gpus)
}

// baselineGPUs is the job's GPUs in the baseline round, where a share takes a whole GPU.
func (j streamJob) baselineGPUs() int { return j.pods * j.gpus }

// template is the name of the claim template the job's pods use in a round.
func (j streamJob) template(mode string) string {
	if j.pct > 0 && mode == "gpudra" {
		return fmt.Sprintf("share-%d", j.pct)
	}
	return fmt.Sprintf("gpus-%d", j.gpus)
}

// tracePod is what the stream reads of one GPU pod of a trace.
type tracePod struct {
	name              string
	gpus              int
	milli             int64
	created, lifetime int64 // seconds
}

// streamTraceColumns are the columns the stream reads; the multigpu traces lack the times.
var streamTraceColumns = []string{"name", "num_gpu", "gpu_milli", "creation_time", "deletion_time"}

// readStreamTrace reads a shipped trace's GPU pods (CPU-only pods are skipped), in the order
// they were created.
func readStreamTrace(trace string) ([]tracePod, error) {
	fsys := traces.AlibabaGPU2023()
	name := reproduction.PodListFile(trace)
	f, err := fsys.Open(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			names, _ := reproduction.TracesIn(fsys)
			return nil, fmt.Errorf("-stream-trace %q: no such trace; accepted: %s", trace, strings.Join(names, ", "))
		}
		return nil, err
	}
	defer f.Close()
	pods, err := parseStreamTrace(io.LimitReader(f, reproduction.MaxTraceBytes))
	if err != nil {
		return nil, fmt.Errorf("-stream-trace %q (%s): %w", trace, name, err)
	}
	return pods, nil
}

func parseStreamTrace(r io.Reader) ([]tracePod, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	col := map[string]int{}
	for i, h := range header {
		col[strings.TrimSpace(h)] = i
	}
	for _, c := range streamTraceColumns {
		if _, ok := col[c]; !ok {
			return nil, fmt.Errorf("no column %q; the stream needs %s (the multigpu traces have no times)", c, strings.Join(streamTraceColumns, ", "))
		}
	}
	var out []tracePod
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		field := func(c string) string {
			if i := col[c]; i < len(rec) {
				return strings.TrimSpace(rec[i])
			}
			return ""
		}
		num := func(c string) (int64, error) {
			v, err := strconv.ParseInt(field(c), 10, 64)
			if err != nil || v < 0 {
				return 0, fmt.Errorf("line %d: %s %q: want a whole number ≥ 0", line, c, field(c))
			}
			return v, nil
		}
		gpus, err := num("num_gpu")
		if err != nil {
			return nil, err
		}
		if gpus == 0 {
			continue
		}
		milli, err1 := num("gpu_milli")
		created, err2 := num("creation_time")
		deleted, err3 := num("deletion_time")
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, err
		}
		switch {
		case gpus > gangNodeGPUs:
			return nil, fmt.Errorf("line %d: num_gpu %d: accepted 0..%d (one node's GPUs)", line, gpus, gangNodeGPUs)
		case milli < 10 || milli > 1000:
			return nil, fmt.Errorf("line %d: gpu_milli %d: accepted 10..1000 for a GPU pod", line, milli)
		case gpus > 1 && milli != 1000:
			return nil, fmt.Errorf("line %d: gpu_milli %d with num_gpu %d: several GPUs must be whole (1000)", line, milli, gpus)
		}
		out = append(out, tracePod{name: field("name"), gpus: int(gpus), milli: milli, created: created, lifetime: max(deleted-created, 0)})
		if len(out) > reproduction.MaxArrivals {
			return nil, fmt.Errorf("more than %d GPU pods", reproduction.MaxArrivals)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no GPU pods")
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].created < out[j].created })
	return out, nil
}

// streamParams shape the stream.
type streamParams struct {
	window    time.Duration // how long jobs arrive
	rate      float64       // mean arrivals per second
	medianRun time.Duration // the median job's run time
	gangEvery int           // every gangEvery-th arrival is a gang; 0: none
}

// Bounds on a stream's run times: a job runs at least minRun, at most maxRun.
const (
	minRun = 5 * time.Second
	maxRun = time.Hour
)

// buildStream makes the stream's jobs from a trace's pods: the first window×rate of them in
// creation order (from the start again when the trace is shorter), their arrival gaps
// scaled so that the last arrives at the end of the window, their run times scaled so that
// the median is medianRun.
func buildStream(pods []tracePod, p streamParams) ([]streamJob, error) {
	n := int(math.Round(p.window.Seconds() * p.rate))
	switch {
	case len(pods) == 0:
		return nil, errors.New("no GPU pods to take jobs from")
	case n < 1:
		return nil, fmt.Errorf("-stream %s at -stream-rate %g: fewer than one job; accepted a window and rate whose product is at least 1", p.window, p.rate)
	case n > 100_000:
		return nil, fmt.Errorf("-stream %s at -stream-rate %g: %d jobs; accepted at most 100000", p.window, p.rate, n)
	case p.medianRun <= 0:
		return nil, fmt.Errorf("-stream-median-run %s: accepted a positive duration", p.medianRun)
	case p.gangEvery < 0:
		return nil, fmt.Errorf("-stream-gang-every %d: accepted 0 (no gangs) or more", p.gangEvery)
	}
	// Arrival times on one clock: a wrap to the trace's start continues after its end. A
	// trace starts with the pods already running when it was taken, created over months
	// before the steady arrivals: gaps are capped at 3× the 90th percentile gap, so that
	// those do not leave the window empty until its end.
	picked := make([]tracePod, n)
	gaps := make([]int64, n)
	for i := range n {
		picked[i] = pods[i%len(pods)]
		if i > 0 {
			gaps[i] = max(picked[i].created-picked[i-1].created, 0)
			if i%len(pods) == 0 {
				gaps[i] = -1 // a wrap: the median gap, below
			}
		}
	}
	sorted := slices.DeleteFunc(slices.Clone(gaps[1:]), func(g int64) bool { return g < 0 })
	slices.Sort(sorted)
	gapCap, median := int64(0), int64(0)
	if len(sorted) > 0 {
		gapCap, median = 3*sorted[len(sorted)*9/10], sorted[len(sorted)/2]
	}
	clock := make([]int64, n)
	for i := 1; i < n; i++ {
		if gaps[i] < 0 {
			gaps[i] = max(median, 1)
		}
		g := min(gaps[i], gapCap)
		if gapCap == 0 {
			g = 1 // every pod created at once: arrivals evenly spread
		}
		clock[i] = clock[i-1] + g
	}
	lifetimes := make([]int64, n)
	for i, tp := range picked {
		lifetimes[i] = tp.lifetime
	}
	slices.Sort(lifetimes)
	medianLife := max(lifetimes[n/2], 1)
	jobs := make([]streamJob, n)
	gangs := 0
	for i, tp := range picked {
		at := time.Duration(0)
		if clock[n-1] > 0 {
			at = time.Duration(float64(p.window) * float64(clock[i]) / float64(clock[n-1]))
		}
		run := time.Duration(float64(p.medianRun) * float64(tp.lifetime) / float64(medianLife))
		j := streamJob{name: fmt.Sprintf("job-%05d", i), at: at, run: min(max(run, minRun), maxRun).Round(time.Second), pods: 1, gpus: tp.gpus}
		if tp.gpus == 1 && tp.milli < 1000 {
			j.pct = (tp.milli + 9) / 10
		}
		if p.gangEvery > 0 && i%p.gangEvery == p.gangEvery-1 {
			j = streamJob{name: fmt.Sprintf("gang-%05d", i), at: at, run: j.run, pods: streamGangPods[gangs%len(streamGangPods)], gpus: gangNodeGPUs, gang: true}
			gangs++
		}
		jobs[i] = j
	}
	return jobs, nil
}

// streamOffered is the stream's offered load: GPU-seconds its jobs ask for in the gpudra
// round, over what nodes×8 GPUs hold during the window.
func streamOffered(jobs []streamJob, nodes int, window time.Duration) float64 {
	var gs float64
	for _, j := range jobs {
		gs += j.demand() * j.run.Seconds()
	}
	return gs / (float64(nodes*gangNodeGPUs) * window.Seconds())
}

// streamNamespace is a round's namespace: its LocalQueue and a claim template for each
// shape its jobs use.
func streamNamespace(r gangRound, jobs []streamJob) string {
	var b strings.Builder
	fmt.Fprintf(&b, `---
apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: %[1]s}
spec: {clusterQueue: bench-%[2]s}
`, r.set, r.mode)
	seen := map[string]bool{}
	for _, j := range jobs {
		t := j.template(r.mode)
		if seen[t] {
			continue
		}
		seen[t] = true
		if j.pct > 0 && r.mode == "gpudra" {
			// A share's memory is the same part of an 80 GB card as its compute: the check
			// refuses a share asking for more of its card's memory than of its compute.
			fmt.Fprintf(&b, `---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: %s, namespace: %s}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: %s
          capacity: {requests: {%s: "%d", %s: "%dMi"}}
`, t, r.set, api.DeviceClassShare, api.CapCompute, j.pct, api.CapMemory, 800*j.pct)
			continue
		}
		fmt.Fprintf(&b, `---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: %s, namespace: %s}
spec:
  spec:
    devices:
      requests:
      - {name: gpu, exactly: {deviceClassName: %s, allocationMode: ExactCount, count: %d}}
`, t, r.set, api.DeviceClassGPU, j.gpus)
	}
	return b.String()
}

// streamJobManifest is the job as a Job of the round. A gang in the gpudra round is kept in
// one rack and gated until the check pins its pods; the baseline's pods name the
// baseline's kube-scheduler.
func streamJobManifest(r gangRound, j streamJob) string {
	meta, gate, sched, indexed := "", "", "", ""
	if r.mode == "gpudra" && j.gang {
		meta = fmt.Sprintf("\n    metadata:\n      annotations: {%s: rack}", api.AnnotationRequiredTopology)
		gate = fmt.Sprintf("\n      schedulingGates: [{name: %s}]", api.SchedulingGate)
	}
	if r.mode != "gpudra" {
		sched = "\n      schedulerName: " + baselineScheduler
	}
	if j.gang {
		indexed = "\n  completionMode: Indexed"
	}
	return fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata:
  name: %[1]s
  namespace: %[2]s
  labels: {kueue.x-k8s.io/queue-name: q}
spec:%[3]s
  parallelism: %[4]d
  completions: %[4]d
  template:%[5]s
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 0%[6]s%[7]s
      nodeSelector: {%[8]s: %[9]s}
      resourceClaims: [{name: gpu, resourceClaimTemplateName: %[10]s}]
      containers:
      - name: worker
        image: registry.k8s.io/pause:3.10
        resources:
          requests: {cpu: "1"}
          claims: [{name: gpu}]
`, j.name, r.set, indexed, j.pods, meta, gate, sched, api.LabelBlock, streamBlock, j.template(r.mode))
}

// percentile is the q-th percentile (0..100) of ds by the nearest-rank method; an
// infinite value (a job never bound) sorts last.
func percentile(ds []float64, q float64) float64 {
	if len(ds) == 0 {
		return math.NaN()
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	k := int(math.Ceil(q/100*float64(len(s)))) - 1
	return s[min(max(k, 0), len(s)-1)]
}

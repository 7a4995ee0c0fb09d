// Command admission measures Kueue admission throughput with and without gpudra's topology
// admission check, in the same run, on a lab of simulated nodes:
//
//	go run ./test/bench/admission [-racks 10] [-nodes-per-rack 64] [-workloads 120] [-objects workloads,jobs]
//	go run ./test/bench/admission -gang 128x8
//
// It starts a lab with Kueue and gpudra-controller, adds racks × nodes kwok nodes of 8 GPUs
// (DGX H100 profile; their ResourceSlices published by this program, as each node's plugin
// would), then submits gangs of 2, 4 and 8 one-GPU pods to a ClusterQueue without the check
// (Kueue alone) and to one with gpudra.dev/topology (each gang kept in one rack), one round
// each. It does so twice: as bare Workloads, as Kueue's own scheduler performance tests
// submit them (admission alone), Kueue alone first, then as Jobs (admission while the
// admitted gangs' pods are created, allocated their claims, pinned and started: the whole
// path, on the same machine), the check first, so that neither mode always has the later,
// warmer round. Each queue holds admissions (stopPolicy Hold) until all its Workloads exist
// and is then released, so what is measured is how fast a backlog is admitted, not how fast
// objects are created. It reports workloads admitted per second and time-to-admission
// percentiles (from the release) for each; after a round of Jobs it waits until all their
// pods run, so that every gang the check placed is shown to be schedulable where it was
// placed. Each round's Workloads or Jobs are deleted after it and their pods and claims
// awaited gone, so every round starts on an empty cluster: admitted bare Workloads never get
// ready pods, and left in place Kueue would evict and admit them again (waitForPodsReady)
// during later rounds.
//
// With -gang it measures one training gang end to end instead (gang.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/simulated"
	"github.com/gpudra/gpudra/lab"
	"github.com/gpudra/gpudra/test/bench/internal/benchlab"
	"github.com/gpudra/gpudra/test/bench/internal/proc"
	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

var cpuProfile string

var (
	workloadsGVR     = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}
	clusterQueuesGVR = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"}
)

func main() {
	racks := flag.Int("racks", 10, "racks of the simulated block")
	perRack := flag.Int("nodes-per-rack", 64, "8-GPU nodes per rack")
	n := flag.Int("workloads", 120, "gang workloads submitted per mode (sizes 2, 4, 8 pods in turn)")
	keep := flag.Bool("keep", false, "leave the lab running afterwards")
	objects := flag.String("objects", "workloads,jobs", "the rounds' kinds, in order: workloads (bare Workloads), jobs (Jobs whose pods start)")
	gang := flag.String("gang", "", "instead, one Job of PODSxGPUS (e.g. 128x8) end to end: the check with gpudra-scheduler on gpudra's slices, then Kueue alone with kube-scheduler on plain slices")
	baselineFirst := flag.Bool("baseline-first", false, "with -gang or -stream, run the baseline round (B) before the gpudra round (A)")
	stream := flag.Duration("stream", 0, "instead, a stream of mixed jobs from an Alibaba trace for this long (e.g. 5m), on -stream-nodes nodes: the check with gpudra-scheduler on gpudra's slices, then Kueue alone with kube-scheduler on plain slices")
	streamNodes := flag.Int("stream-nodes", 512, "with -stream, 8-GPU nodes, in racks of 16 (512: 4 096 GPUs)")
	streamRate := flag.Float64("stream-rate", 2, "with -stream, mean jobs arriving per second")
	streamTrace := flag.String("stream-trace", "default", "with -stream, the shipped Alibaba openb trace the jobs come from")
	streamMedian := flag.Duration("stream-median-run", 90*time.Second, "with -stream, the median job's run time once its pods are bound (the trace's run times scaled)")
	streamGangEvery := flag.Int("stream-gang-every", 25, "with -stream, every Nth arrival is a gang of 2, 4, 8 or 16 pods × 8 GPUs in turn (0: none)")
	streamOnly := flag.String("stream-only", "", "with -stream, run only round A or B (to look at one side, e.g. with -cpuprofile)")
	streamShareNodes := flag.Int("stream-share-nodes", 0, "with -stream, > 0: in round A only the first N nodes publish shares (a share pool), the others what the plugin's --publish=training publishes (a training pool)")
	streamProfileAt := flag.Duration("stream-cpuprofile-at", 0, "with -stream and -cpuprofile, when in the window the 15-second profiles start (0: halfway)")
	streamDrain := flag.Duration("stream-drain", 2*time.Minute, "with -stream, how long after the window to wait for the jobs still queued to be bound")
	flag.StringVar(&wholeGPUQuota, "whole-gpu-quota", deployments.KueueWholeGPUQuotaPercent, "how the lab's Kueue charges whole GPUs: percent (the shipped configuration, 100 gpudra.dev/gpu-percent a GPU) or count (one gpudra.dev/gpu a GPU; the queues get quota in both)")
	flag.StringVar(&cpuProfile, "cpuprofile", "", "write CPU profiles of gpudra-controller, taken while the gpudra queue admits, to FILE.workloads and FILE.jobs (FILE.gang with -gang; with -stream, gpudra-controller's and Kueue's halfway through each round's window or at -stream-cpuprofile-at, to FILE.stream-ROUND-PROCESS)")
	flag.Parse()
	if !slices.Contains(deployments.KueueWholeGPUQuotas, wholeGPUQuota) {
		fmt.Fprintf(os.Stderr, "admission benchmark: -whole-gpu-quota %q: accepted values: %s\n", wholeGPUQuota, strings.Join(deployments.KueueWholeGPUQuotas, ", "))
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if *stream != 0 {
		if *streamNodes < gangRackNodes || *streamNodes > 1024 || *streamNodes%gangRackNodes != 0 {
			fmt.Fprintf(os.Stderr, "admission benchmark: -stream-nodes %d: accepted a multiple of %d from %d to 1024\n", *streamNodes, gangRackNodes, gangRackNodes)
			os.Exit(2)
		}
		if *stream < 0 || *streamDrain < 0 {
			fmt.Fprintln(os.Stderr, "admission benchmark: -stream and -stream-drain: accepted positive durations")
			os.Exit(2)
		}
		err := runStream(ctx, streamRun{
			params: streamParams{window: *stream, rate: *streamRate, medianRun: *streamMedian, gangEvery: *streamGangEvery},
			nodes:  *streamNodes, trace: *streamTrace, drain: *streamDrain, baselineFirst: *baselineFirst, keep: *keep, only: *streamOnly, shareNodes: *streamShareNodes, profileAt: *streamProfileAt,
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "admission benchmark:", err)
			os.Exit(1)
		}
		return
	}
	if *gang != "" {
		shape, err := parseGang(*gang)
		if err != nil {
			fmt.Fprintln(os.Stderr, "admission benchmark:", err)
			os.Exit(2)
		}
		if err := runGang(ctx, shape, *baselineFirst, *keep); err != nil {
			fmt.Fprintln(os.Stderr, "admission benchmark:", err)
			os.Exit(1)
		}
		return
	}
	kinds, err := parseObjects(*objects)
	if err != nil {
		fmt.Fprintln(os.Stderr, "admission benchmark:", err)
		os.Exit(2)
	}
	if err := run(ctx, *racks, *perRack, *n, kinds, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "admission benchmark:", err)
		os.Exit(1)
	}
}

const labFile = `apiVersion: lab.gpudra.dev/v1alpha1
kind: Lab
kueue: {enabled: true}
blocks:
- name: bench-plugins
  racks:
  - name: bench-plugins
    nodes:
    - {name: bench-plugin-node, profile: dgx-h100}
`

// parseObjects reads the -objects flag: a comma-separated list of workloads and jobs.
func parseObjects(v string) ([]string, error) {
	var out []string
	for _, k := range strings.Split(v, ",") {
		k = strings.TrimSpace(k)
		if k != "workloads" && k != "jobs" {
			return nil, fmt.Errorf("-objects: %q is not a kind of round; accepted: workloads, jobs (comma-separated)", k)
		}
		if slices.Contains(out, k) {
			return nil, fmt.Errorf("-objects: %q is named twice", k)
		}
		out = append(out, k)
	}
	return out, nil
}

// modesOf is the order of a kind's two rounds: bare Workloads go to Kueue alone first, Jobs
// to the checked queue first.
func modesOf(objects string) []string {
	if objects == "jobs" {
		return []string{"gpudra", "kueue"}
	}
	return []string{"kueue", "gpudra"}
}

func run(ctx context.Context, racks, perRack, n int, kinds []string, keep bool) error {
	state, down, err := benchlab.Up(ctx, withWholeGPUQuota(labFile), keep)
	if err != nil {
		return err
	}
	defer down()
	controllerState = state.Component("gpudra-controller")
	labState = state
	cfg, err := state.RESTConfig()
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 200, 400
	cs := kubernetes.NewForConfigOrDie(cfg)

	start := time.Now()
	if err := addNodes(ctx, cs, racks, perRack); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "added %d nodes of 8 GPUs with their ResourceSlices in %s\n", racks*perRack, time.Since(start).Round(time.Second))

	gpus := racks * perRack * 8
	if err := apply(ctx, cfg, queues(gpus)); err != nil {
		return err
	}
	var results []result
	for _, objects := range kinds {
		if err := apply(ctx, cfg, namespaces(objects)); err != nil {
			return err
		}
		for _, mode := range modesOf(objects) {
			r, err := measure(ctx, cfg, cs, mode, objects, n)
			if err != nil {
				return err
			}
			results = append(results, r)
			if c := controllerState; mode == "gpudra" && c != nil && c.Ports["metrics"] > 0 {
				// Where the check's time went (totals since the controller started): waits
				// for the decision lock, decisions, writes, the work queue.
				fmt.Fprintf(os.Stderr, "gpudra-controller after %s:\n", r.namespace)
				for _, line := range controllerMetrics(ctx, c.Ports["metrics"]) {
					fmt.Fprintln(os.Stderr, "    "+line)
				}
			}
			if objects == "jobs" {
				// The admitted gangs' pods (their claims allocated, bound, started by kwok)
				// load the API server for a while after the last admission: the next round
				// starts on a quiet cluster, not in the tail of this one's pod start-up.
				running, err := waitPodsRunning(ctx, cs, r.namespace, podsOf(r.admitted))
				if err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "%s: %d pods running %s after the last admission\n", r.namespace, running, time.Since(r.last).Round(time.Second))
			}
			start := time.Now()
			if err := cleanUp(ctx, cfg, cs, r.namespace, objects); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "%s: deleted, its pods and claims gone, in %s\n", r.namespace, time.Since(start).Round(time.Second))
		}
	}
	profiling.Wait()
	fmt.Printf("\nAdmission of %d gang workloads (2/4/8 one-GPU pods) per mode, %d nodes × 8 GPUs (%d racks):\n\n", n, racks*perRack, racks)
	fmt.Println("| submitted as | mode | admitted | workloads/s | p50 | p90 | p99 (from the queue's release) |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, r := range results {
		fmt.Printf("| %s | %s | %d/%d | %.1f | %s | %s | %s |\n", r.objects, r.mode, r.admitted, n, r.rate, r.p(50), r.p(90), r.p(99))
	}
	fmt.Println()
	for _, objects := range kinds {
		rate := map[string]float64{}
		for _, r := range results {
			if r.objects == objects {
				rate[r.mode] = r.rate
			}
		}
		if rate["kueue"] > 0 {
			fmt.Printf("%s (%s first): gpudra check / Kueue alone: %.2f× the throughput\n", objects, modesOf(objects)[0], rate["gpudra"]/rate["kueue"])
		}
	}
	return nil
}

// deleteCollectionTries bounds how often cleanUp asks for a round's objects to be deleted.
const deleteCollectionTries = 5

// cleanUp deletes a round's Workloads or Jobs and waits (up to 5 minutes) until the
// namespace holds no Workload, pod or ResourceClaim: the next round starts on free devices
// and without this round's Workloads, which Kueue would otherwise evict for pods that never
// became ready and admit again while later rounds are measured.
func cleanUp(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, ns, objects string) error {
	dyn := dynamic.NewForConfigOrDie(cfg)
	background := metav1.DeletePropagationBackground
	del := metav1.DeleteOptions{PropagationPolicy: &background}
	// A busy API server may cut a collection delete of hundreds of objects short (the
	// request's timeout); what it deleted stays deleted, and the next try deletes the rest.
	var err error
	for try := 0; try < deleteCollectionTries; try++ {
		if objects == "jobs" {
			err = cs.BatchV1().Jobs(ns).DeleteCollection(ctx, del, metav1.ListOptions{})
		} else {
			err = dyn.Resource(workloadsGVR).Namespace(ns).DeleteCollection(ctx, del, metav1.ListOptions{})
		}
		if err == nil || ctx.Err() != nil {
			break
		}
		fmt.Fprintf(os.Stderr, "delete the %s of %s (try %d of %d): %v\n", objects, ns, try+1, deleteCollectionTries, err)
	}
	if err != nil {
		return fmt.Errorf("delete the %s of %s: %w", objects, ns, err)
	}
	left := ""
	err = wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		wls, err := dyn.Resource(workloadsGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		claims, err := cs.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		left = fmt.Sprintf("%d Workloads, %d pods, %d ResourceClaims", len(wls.Items), len(pods.Items), len(claims.Items))
		return len(wls.Items)+len(pods.Items)+len(claims.Items) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("%s: still %s 5 minutes after deleting its %s: %w", ns, left, objects, err)
	}
	return nil
}

// profiling is the profile being taken, if any.
var profiling sync.WaitGroup

// labState is the lab's record of its processes.
var labState *lab.State

// cpuSample is the CPU time each lab process and the whole machine had used at one moment.
type cpuSample struct {
	at      time.Time
	procs   map[string]float64 // component name → CPU seconds
	machine float64            // busy CPU seconds of all cores
}

func sampleCPU() cpuSample {
	s := cpuSample{at: time.Now(), procs: map[string]float64{}}
	if labState != nil {
		for _, c := range labState.Components {
			s.procs[c.Name] = proc.CPUSeconds(c.PID)
		}
	}
	if data, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(data), "\n")
		f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
		for i := 1; i < len(f); i++ {
			if i == 4 || i == 5 { // idle, iowait
				continue
			}
			v, _ := strconv.ParseFloat(f[i], 64)
			s.machine += v / proc.ClockTicks
		}
	}
	return s
}

// cpuSince says where the CPU went since before: each component's seconds, largest first,
// and how busy the machine's cores were.
func cpuSince(before cpuSample) string {
	now := sampleCPU()
	type use struct {
		name string
		sec  float64
	}
	var uses []use
	for name, v := range now.procs {
		if d := v - before.procs[name]; d >= 0.05 {
			uses = append(uses, use{name, d})
		}
	}
	slices.SortFunc(uses, func(a, b use) int { return int((b.sec - a.sec) * 1000) })
	var parts []string
	for _, u := range uses {
		parts = append(parts, fmt.Sprintf("%s %.1f s", u.name, u.sec))
	}
	wall := now.at.Sub(before.at).Seconds()
	return fmt.Sprintf("CPU over %.1f s: %s; machine busy %.1f of %d cores", wall, strings.Join(parts, ", "), (now.machine-before.machine)/wall, runtime.NumCPU())
}

// workloadRequests reads the API server's request counts on Workloads, by verb and
// subresource, from its metrics.
func workloadRequests(ctx context.Context, cs kubernetes.Interface) map[string]float64 {
	out := map[string]float64{}
	data, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return out
	}
	for _, l := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(l, "apiserver_request_total{") || !strings.Contains(l, `resource="workloads"`) {
			continue
		}
		labels, value, _ := strings.Cut(l[len("apiserver_request_total{"):], "} ")
		var verb, sub string
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "verb":
				verb = strings.Trim(v, `"`)
			case "subresource":
				sub = strings.Trim(v, `"`)
			}
		}
		if verb == "WATCH" || verb == "LIST" || verb == "GET" {
			continue
		}
		if sub != "" {
			verb += " " + sub
		}
		v, _ := strconv.ParseFloat(value, 64)
		out[verb] += v
	}
	return out
}

// requestsSince says how many write requests on Workloads the API server served since
// before, per admitted workload.
func requestsSince(ctx context.Context, cs kubernetes.Interface, before map[string]float64, admitted int) string {
	if admitted == 0 {
		return "-"
	}
	now := workloadRequests(ctx, cs)
	var parts []string
	total := 0.0
	for _, verb := range slices.Sorted(maps.Keys(now)) {
		if d := now[verb] - before[verb]; d > 0 {
			parts = append(parts, fmt.Sprintf("%s %.1f", verb, d/float64(admitted)))
			total += d
		}
	}
	return fmt.Sprintf("%.1f (%s)", total/float64(admitted), strings.Join(parts, ", "))
}

// controllerState is the lab's record of gpudra-controller (nil if it is not running).
var controllerState *lab.Component

// profileController writes a 15-second CPU profile of gpudra-controller to file.
func profileController(ctx context.Context, file string) {
	if controllerState == nil || controllerState.Ports["metrics"] == 0 {
		fmt.Fprintln(os.Stderr, "cpuprofile: no gpudra-controller metrics port")
		return
	}
	profileCPU(ctx, controllerState.Ports["metrics"], file)
}

// profileCPU writes a 15-second CPU profile of the process serving /debug/pprof on port to file.
func profileCPU(ctx context.Context, port int, file string) {
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/debug/pprof/profile?seconds=15"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cpuprofile:", err)
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cpuprofile:", err)
		return
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err == nil {
		err = os.WriteFile(file, data, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cpuprofile:", err)
	}
}

// printControllerMetrics prints the check's series after the gpudra round r.
func printControllerMetrics(ctx context.Context, r gangRound) {
	if r.mode != "gpudra" || controllerState == nil || controllerState.Ports["metrics"] == 0 {
		return
	}
	fmt.Fprintf(os.Stderr, "gpudra-controller after round %s:\n", r.name)
	for _, line := range controllerMetrics(ctx, controllerState.Ports["metrics"]) {
		fmt.Fprintln(os.Stderr, "    "+line)
	}
}

// controllerMetrics scrapes the check's own series from gpudra-controller's metrics.
func controllerMetrics(ctx context.Context, port int) []string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(port)+"/metrics", nil)
	if err != nil {
		return []string{err.Error()}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return []string{err.Error()}
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "gpudra_admission_") && (strings.Contains(l, "_sum") || strings.Contains(l, "_count") || strings.Contains(l, "_total")) ||
			(strings.Contains(l, `name="gpudra-topology"`) && strings.HasPrefix(l, "workqueue_") && (strings.Contains(l, "_sum") || strings.Contains(l, "_count"))) ||
			(strings.Contains(l, `controller="gpudra-topology"`) && (strings.HasPrefix(l, "controller_runtime_reconcile_total") || strings.HasPrefix(l, "controller_runtime_reconcile_errors_total") || strings.HasPrefix(l, "controller_runtime_reconcile_time_seconds_sum"))) {
			out = append(out, l)
		}
	}
	return out
}

// addNodes creates the kwok nodes and publishes each one's ResourceSlices (what its plugin would).
func addNodes(ctx context.Context, cs kubernetes.Interface, racks, perRack int) error {
	var nodes []lab.Node
	for r := range racks {
		for i := range perRack {
			nodes = append(nodes, lab.Node{
				Name: fmt.Sprintf("r%02d-n%02d", r, i), Profile: "dgx-h100",
				Block: "bench", Rack: fmt.Sprintf("rack-%02d", r), ToR: fmt.Sprintf("tor-%02d", r),
				Resources: lab.NodeResources{CPU: "112", Memory: "2Ti", Pods: 110},
			})
		}
	}
	work := make(chan lab.Node)
	errs := make(chan error, len(nodes))
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for nd := range work {
				errs <- addNode(ctx, cs, nd)
			}
		})
	}
	for _, nd := range nodes {
		work <- nd
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func addNode(ctx context.Context, cs kubernetes.Interface, n lab.Node) error {
	if err := lab.AddKwokNode(ctx, cs, n); err != nil {
		return err
	}
	_, slices, err := simulated.Slices(n.Profile, n.Name, driver.RenderOptions{})
	if err != nil {
		return err
	}
	for _, s := range slices {
		if _, err := cs.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	return nil
}

// wholeGPUQuota is the -whole-gpu-quota flag (deployments.KueueWholeGPUQuotas).
var wholeGPUQuota = deployments.KueueWholeGPUQuotaPercent

// withWholeGPUQuota is a bench lab file whose Kueue charges whole GPUs as -whole-gpu-quota
// says.
func withWholeGPUQuota(file string) string {
	const on = "kueue: {enabled: true}"
	if !strings.Contains(file, on) {
		panic("a bench lab file without " + on)
	}
	return strings.Replace(file, on, fmt.Sprintf("kueue: {enabled: true, wholeGPUQuota: %s}", wholeGPUQuota), 1)
}

// queues are the bench's two ClusterQueues, each with quota for gpus GPUs: in GPU percent,
// and with -whole-gpu-quota count in whole GPUs as well.
func queues(gpus int) string {
	covered, count := "cpu, "+api.QuotaGPUPercent, ""
	if wholeGPUQuota == deployments.KueueWholeGPUQuotaCount {
		covered += ", " + api.QuotaGPU
		count = fmt.Sprintf("\n      - {name: %s, nominalQuota: \"%d\"}", api.QuotaGPU, gpus)
	}
	var b strings.Builder
	for _, mode := range []string{"kueue", "gpudra"} {
		check := ""
		if mode == "gpudra" {
			check = "\n  admissionChecksStrategy:\n    admissionChecks: [{name: gpudra-topology}]"
		}
		fmt.Fprintf(&b, `---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: bench-%[1]s}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: bench-%[1]s}
spec:
  namespaceSelector: {}
  stopPolicy: Hold%[2]s
  resourceGroups:
  - coveredResources: [%[4]s]
    flavors:
    - name: bench-%[1]s
      resources:
      - {name: cpu, nominalQuota: "100000"}
      - {name: gpudra.dev/gpu-percent, nominalQuota: "%[3]d"}%[5]s
`, mode, check, 100*gpus, covered, count)
	}
	return b.String()
}

// namespaces are the namespaces of one round (Workloads or Jobs), one per ClusterQueue,
// each with its LocalQueue and the one-GPU claim template.
func namespaces(objects string) string {
	var b strings.Builder
	for _, mode := range []string{"kueue", "gpudra"} {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: %[1]s}
spec: {clusterQueue: bench-%[2]s}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu, namespace: %[1]s}
spec:
  spec:
    devices:
      requests:
      - {name: gpu, exactly: {deviceClassName: gpu.gpudra.dev}}
`, namespace(mode, objects), mode)
	}
	return b.String()
}

func namespace(mode, objects string) string { return "bench-" + mode + "-" + objects }

// podTemplate is a gang pod's template: one GPU through the claim template; with the
// check, the gang is kept in one rack and its pods wait for gpudra to pin them.
func podTemplate(mode, indent string) string {
	meta, gate := "", ""
	if mode == "gpudra" {
		meta = "\nmetadata:\n  annotations: {gpudra.dev/required-topology: rack}"
		gate = "\n  schedulingGates: [{name: gpudra.dev/placement}]"
	}
	t := strings.TrimPrefix(meta+`
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 0`+gate+`
  nodeSelector: {`+api.LabelBlock+`: bench}
  resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
  containers:
  - name: worker
    image: registry.k8s.io/pause:3.10
    resources:
      requests: {cpu: "1"}
      claims: [{name: gpu}]
`, "\n")
	return indent + strings.ReplaceAll(strings.TrimSuffix(t, "\n"), "\n", "\n"+indent) + "\n"
}

// job is gang i as a Job: Kueue's Job integration makes its Workload and, once it is
// admitted, the Job controller creates its pods.
func job(mode string, i, pods int) string {
	return fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata:
  name: gang-%04d
  namespace: %s
  labels: {kueue.x-k8s.io/queue-name: q}
spec:
  parallelism: %d
  completions: %d
  template:
%s`, i, namespace(mode, "jobs"), pods, pods, podTemplate(mode, "    "))
}

// workload is gang i as a bare Workload, as Kueue's own scheduler performance tests submit
// them: admission alone, without pods started.
func workload(mode string, i, pods int) string {
	return fmt.Sprintf(`apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata:
  name: gang-%04d
  namespace: %s
spec:
  queueName: q
  podSets:
  - name: main
    count: %d
    template:
%s`, i, namespace(mode, "workloads"), pods, podTemplate(mode, "      "))
}

func apply(ctx context.Context, cfg *rest.Config, manifests string) error {
	objs, err := lab.DecodeManifests([]byte(manifests))
	if err != nil {
		return err
	}
	ap, err := lab.NewApplier(cfg)
	if err != nil {
		return err
	}
	return ap.Apply(ctx, objs...)
}

type result struct {
	last      time.Time // when the last Workload was admitted
	stages    string    // median time per stage
	mode      string
	objects   string // "workloads" or "jobs"
	namespace string
	admitted  int
	rate      float64
	latency   []time.Duration
}

func (r result) p(q int) string {
	if len(r.latency) == 0 {
		return "-"
	}
	return r.latency[min(len(r.latency)-1, len(r.latency)*q/100)].Round(time.Millisecond).String()
}

// measure submits n gang Jobs to the mode's ClusterQueue while it holds admissions
// (stopPolicy Hold), waits until Kueue has a Workload for each, then releases the queue and
// watches until all are admitted (or 10 minutes pass): admission throughput with a backlog,
// not the rate at which this program can create Jobs. Latencies are from the release.
func measure(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, mode, objects string, n int) (result, error) {
	ns := namespace(mode, objects)
	dyn := dynamic.NewForConfigOrDie(cfg)
	hold := []byte(`{"spec":{"stopPolicy":"Hold"}}`)
	if _, err := dyn.Resource(clusterQueuesGVR).Patch(ctx, "bench-"+mode, types.MergePatchType, hold, metav1.PatchOptions{}); err != nil {
		return result{}, fmt.Errorf("hold ClusterQueue bench-%s: %w", mode, err)
	}
	work := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				errs <- submit(ctx, cs, dyn, mode, objects, i)
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return result{}, fmt.Errorf("submit: %w", err)
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := dyn.Resource(workloadsGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) >= n, nil
	}); err != nil {
		return result{}, fmt.Errorf("%s: Kueue did not create the %d Workloads: %w", mode, n, err)
	}

	// Held: none is admitted yet. A watch the API server ends is resumed from the last
	// version seen (a loaded server ends watches early).
	wls := dyn.Resource(workloadsGVR).Namespace(ns)
	list, err := wls.List(ctx, metav1.ListOptions{})
	if err != nil {
		return result{}, err
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.GetResourceVersion(), &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return wls.Watch(ctx, o) },
	})
	if err != nil {
		return result{}, err
	}
	defer w.Stop()
	admitted := map[string]time.Time{}
	var stages []stageTimes
	release := []byte(`{"spec":{"stopPolicy":"None"}}`)
	if mode == "gpudra" && cpuProfile != "" {
		profiling.Go(func() { profileController(ctx, cpuProfile+"."+objects) })
	}
	cpu := sampleCPU()
	requests := workloadRequests(ctx, cs)
	start := time.Now()
	if _, err := dyn.Resource(clusterQueuesGVR).Patch(ctx, "bench-"+mode, types.MergePatchType, release, metav1.PatchOptions{}); err != nil {
		return result{}, fmt.Errorf("release ClusterQueue bench-%s: %w", mode, err)
	}
	deadline := time.After(10 * time.Minute)
	var last time.Time
	for len(admitted) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return result{}, fmt.Errorf("workload watch ended")
			}
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok || !isAdmitted(u) {
				continue
			}
			if _, seen := admitted[u.GetName()]; !seen {
				admitted[u.GetName()] = time.Now()
				last = admitted[u.GetName()]
				stages = append(stages, stagesOf(u))
			}
		case <-deadline:
			fmt.Fprintf(os.Stderr, "%s: %d of %d admitted after 10 minutes\n", ns, len(admitted), n)
			n = len(admitted)
		case <-ctx.Done():
			return result{}, ctx.Err()
		}
	}
	r := result{mode: mode, objects: objects, namespace: ns, admitted: len(admitted), last: last}
	for _, at := range admitted {
		r.latency = append(r.latency, at.Sub(start))
	}
	slices.Sort(r.latency)
	if el := last.Sub(start).Seconds(); el > 0 {
		r.rate = float64(r.admitted) / el
	}
	fmt.Fprintf(os.Stderr, "%s: %d workloads admitted in %s after the queue's release\n", ns, r.admitted, last.Sub(start).Round(time.Millisecond))
	r.stages = stageSummary(stages, start)
	fmt.Fprintf(os.Stderr, "%s: medians: %s\n", ns, r.stages)
	fmt.Fprintf(os.Stderr, "%s: %s\n", ns, cpuSince(cpu))
	fmt.Fprintf(os.Stderr, "%s: API requests on Workloads per admitted workload: %s\n", ns, requestsSince(ctx, cs, requests, r.admitted))
	return r, nil
}

// submit creates gang i of the round.
func submit(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, mode, objects string, i int) error {
	pods := podSizes[i%len(podSizes)]
	if objects == "workloads" {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(workload(mode, i, pods)), &u.Object); err != nil {
			return err
		}
		_, err := dyn.Resource(workloadsGVR).Namespace(u.GetNamespace()).Create(ctx, &u, metav1.CreateOptions{})
		return err
	}
	var j batchv1.Job
	if err := yaml.UnmarshalStrict([]byte(job(mode, i, pods)), &j); err != nil {
		return err
	}
	_, err := cs.BatchV1().Jobs(j.Namespace).Create(ctx, &j, metav1.CreateOptions{})
	return err
}

// podSizes are the gangs' sizes in turn: workload i has podSizes[i%3] pods.
var podSizes = []int{2, 4, 8}

// podsOf is how many pods the first n workloads have.
func podsOf(n int) int {
	pods := 0
	for i := range n {
		pods += podSizes[i%len(podSizes)]
	}
	return pods
}

// waitPodsRunning waits (up to 10 minutes) until want pods of the namespace run. A pod that
// gpudra pinned to a node (gate lifted, hostname selector) and that the scheduler has found
// unschedulable there for a minute is a wrong placement: the benchmark fails, naming it.
func waitPodsRunning(ctx context.Context, cs kubernetes.Interface, ns string, want int) (int, error) {
	running := 0
	var misplaced error
	err := wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		running = 0
		for _, p := range l.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
				continue
			}
			node := p.Spec.NodeSelector[topology.LabelHostname]
			for _, c := range p.Status.Conditions {
				if node != "" && c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable && time.Since(c.LastTransitionTime.Time) > time.Minute {
					misplaced = fmt.Errorf("pod %s/%s pinned to %s (slot %s of %s) is unschedulable there: %s", ns, p.Name, node, p.Labels[api.LabelPinnedSlot], p.Annotations[api.AnnotationPlacement], c.Message)
					return false, misplaced
				}
			}
		}
		return running >= want, nil
	})
	if misplaced != nil {
		return running, misplaced
	}
	if err != nil {
		return running, fmt.Errorf("%s: %d of %d pods running after 10 minutes: %w", ns, running, want, err)
	}
	return running, nil
}

// stageTimes are when a Workload's quota was reserved, its admission checks decided (the
// latest), and it was admitted, from its status (the API's one-second resolution).
type stageTimes struct{ quota, checks, admitted time.Time }

func stagesOf(u *unstructured.Unstructured) stageTimes {
	var st stageTimes
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		at, _ := time.Parse(time.RFC3339, fmt.Sprint(m["lastTransitionTime"]))
		switch m["type"] {
		case "QuotaReserved":
			st.quota = at
		case "Admitted":
			st.admitted = at
		}
	}
	checks, _, _ := unstructured.NestedSlice(u.Object, "status", "admissionChecks")
	for _, c := range checks {
		m, _ := c.(map[string]any)
		if at, err := time.Parse(time.RFC3339, fmt.Sprint(m["lastTransitionTime"])); err == nil && at.After(st.checks) {
			st.checks = at
		}
	}
	return st
}

// stageSummary is the median time from the release to quota reservation, from there to the
// checks' decision and from there to admission.
func stageSummary(all []stageTimes, release time.Time) string {
	med := func(f func(stageTimes) time.Duration) time.Duration {
		var d []time.Duration
		for _, st := range all {
			d = append(d, f(st))
		}
		if len(d) == 0 {
			return 0
		}
		slices.Sort(d)
		return d[len(d)/2]
	}
	release = release.Truncate(time.Second)
	quota := med(func(st stageTimes) time.Duration { return st.quota.Sub(release) })
	if all[0].checks.IsZero() {
		return fmt.Sprintf("quota reserved %s after the release, admitted %s later", quota, med(func(st stageTimes) time.Duration { return st.admitted.Sub(st.quota) }))
	}
	return fmt.Sprintf("quota reserved %s after the release, checks decided %s later, admitted %s after that",
		quota, med(func(st stageTimes) time.Duration { return st.checks.Sub(st.quota) }), med(func(st stageTimes) time.Duration { return st.admitted.Sub(st.checks) }))
}

func isAdmitted(u *unstructured.Unstructured) bool { return conditionTrue(u, "Admitted") }

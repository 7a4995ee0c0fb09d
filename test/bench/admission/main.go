// Command admission measures Kueue admission throughput with and without gpudra's topology
// admission check, in the same run, on a lab of simulated nodes (issue #5's benchmark):
//
//	go run ./test/bench/admission [-racks 10] [-nodes-per-rack 64] [-workloads 120]
//
// It starts a lab with Kueue and gpudra-controller, adds racks × nodes kwok nodes of 8 GPUs
// (DGX H100 profile; their ResourceSlices published by this program, as each node's plugin
// would), then submits gang Jobs of 2, 4 and 8 one-GPU pods, first to a ClusterQueue without
// the check (Kueue alone), then to one with gpudra.dev/topology (each gang kept in one rack).
// Each queue holds admissions (stopPolicy Hold) until all its Workloads exist and is then
// released, so what is measured is how fast a backlog is admitted, not how fast Jobs are
// created. It reports workloads admitted per second and time-to-admission percentiles (from
// the release) for both.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/test/lab"
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
	flag.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of gpudra-controller, taken while the gpudra queue is admitted, to this file")
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, *racks, *perRack, *n, *keep); err != nil {
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

func run(ctx context.Context, racks, perRack, n int, keep bool) error {
	repo, err := lab.RepoRoot(".")
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "gpudra-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	lf := filepath.Join(tmp, "lab.yaml")
	if err := os.WriteFile(lf, []byte(labFile), 0o600); err != nil {
		return err
	}
	dir := lab.DefaultDir()
	state, err := lab.Up(ctx, lab.Options{Dir: dir, Repo: repo, LabFile: lf, Progress: os.Stderr})
	if err != nil {
		return err
	}
	if !keep {
		defer func() { _ = lab.Down(lab.DownOptions{Dir: dir, Progress: os.Stderr}) }()
	}
	controllerState = state.Component("gpudra-controller")
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
	for _, mode := range []string{"kueue", "gpudra"} {
		r, err := measure(ctx, cfg, cs, mode, n)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	profiling.Wait()
	for _, r := range results {
		fmt.Fprintf(os.Stderr, "%s, medians: %s\n", r.mode, r.stages)
	}
	fmt.Printf("\nAdmission of %d gang workloads (2/4/8 one-GPU pods) per mode, %d nodes × 8 GPUs (%d racks):\n\n", n, racks*perRack, racks)
	fmt.Println("| mode | admitted | workloads/s | p50 | p90 | p99 (from the queue's release) |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, r := range results {
		fmt.Printf("| %s | %d/%d | %.1f | %s | %s | %s |\n", r.mode, r.admitted, n, r.rate, r.p(50), r.p(90), r.p(99))
	}
	if results[0].rate > 0 {
		fmt.Printf("\ngpudra check / Kueue alone: %.2f× the throughput\n", results[1].rate/results[0].rate)
	}
	if c := controllerState; c != nil && c.Ports["metrics"] > 0 {
		// Where the check's time goes: its decisions, and its reconciles that failed (a
		// failed one is retried with back-off).
		fmt.Println("\ngpudra-controller:")
		for _, line := range controllerMetrics(ctx, c.Ports["metrics"]) {
			fmt.Println("    " + line)
		}
	}
	return nil
}

// profiling is the profile being taken, if any.
var profiling sync.WaitGroup

// controllerState is the lab's record of gpudra-controller (nil if it is not running).
var controllerState *lab.Component

// profileController writes a 15-second CPU profile of gpudra-controller to file.
func profileController(ctx context.Context, file string) {
	if controllerState == nil || controllerState.Ports["metrics"] == 0 {
		fmt.Fprintln(os.Stderr, "cpuprofile: no gpudra-controller metrics port")
		return
	}
	url := "http://127.0.0.1:" + strconv.Itoa(controllerState.Ports["metrics"]) + "/debug/pprof/profile?seconds=15"
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
		if strings.HasPrefix(l, "gpudra_admission_decision_seconds_sum") || strings.HasPrefix(l, "gpudra_admission_decision_seconds_count") ||
			strings.HasPrefix(l, "gpudra_admission_decisions_total") ||
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
	_, slices, err := driver.SimulatedSlices(n.Profile, n.Name, driver.RenderOptions{})
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

func queues(gpus int) string {
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
  - coveredResources: [cpu, gpudra.dev/gpu]
    flavors:
    - name: bench-%[1]s
      resources:
      - {name: cpu, nominalQuota: "100000"}
      - {name: gpudra.dev/gpu, nominalQuota: "%[3]d"}
---
apiVersion: v1
kind: Namespace
metadata: {name: bench-%[1]s}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: bench-%[1]s}
spec: {clusterQueue: bench-%[1]s}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu, namespace: bench-%[1]s}
spec:
  spec:
    devices:
      requests:
      - {name: gpu, exactly: {deviceClassName: gpu.gpudra.dev}}
`, mode, check, gpus)
	}
	return b.String()
}

func job(mode string, i, pods int) string {
	meta, gate := "", ""
	if mode == "gpudra" {
		meta = "\n    metadata:\n      annotations: {gpudra.dev/required-topology: rack}"
		gate = "\n      schedulingGates: [{name: gpudra.dev/placement}]"
	}
	return fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata:
  name: gang-%04d
  namespace: bench-%s
  labels: {kueue.x-k8s.io/queue-name: q}
spec:
  parallelism: %d
  completions: %d
  template:%s
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 0%s
      nodeSelector: {%s: bench}
      resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
      containers:
      - name: worker
        image: registry.k8s.io/pause:3.10
        resources:
          requests: {cpu: "1"}
          claims: [{name: gpu}]
`, i, mode, pods, pods, meta, gate, lab.LabelBlock)
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
	stages   string // median time per stage
	mode     string
	admitted int
	rate     float64
	latency  []time.Duration
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
func measure(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, mode string, n int) (result, error) {
	ns := "bench-" + mode
	dyn := dynamic.NewForConfigOrDie(cfg)
	sizes := []int{2, 4, 8}
	work := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				var j batchv1.Job
				if err := yaml.UnmarshalStrict([]byte(job(mode, i, sizes[i%len(sizes)])), &j); err != nil {
					errs <- err
					continue
				}
				_, err := cs.BatchV1().Jobs(ns).Create(ctx, &j, metav1.CreateOptions{})
				errs <- err
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

	w, err := dyn.Resource(workloadsGVR).Namespace(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return result{}, err
	}
	defer w.Stop()
	admitted := map[string]time.Time{}
	var stages []stageTimes
	release := []byte(`{"spec":{"stopPolicy":"None"}}`)
	if mode == "gpudra" && cpuProfile != "" {
		profiling.Go(func() { profileController(ctx, cpuProfile) })
	}
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
			fmt.Fprintf(os.Stderr, "%s: %d of %d admitted after 10 minutes\n", mode, len(admitted), n)
			n = len(admitted)
		case <-ctx.Done():
			return result{}, ctx.Err()
		}
	}
	r := result{mode: mode, admitted: len(admitted)}
	for _, at := range admitted {
		r.latency = append(r.latency, at.Sub(start))
	}
	slices.Sort(r.latency)
	if el := last.Sub(start).Seconds(); el > 0 {
		r.rate = float64(r.admitted) / el
	}
	fmt.Fprintf(os.Stderr, "%s: %d workloads admitted in %s after the queue's release\n", mode, r.admitted, last.Sub(start).Round(time.Millisecond))
	r.stages = stageSummary(stages, start)
	return r, nil
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

func isAdmitted(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Admitted" && m["status"] == "True" {
			return true
		}
	}
	return false
}

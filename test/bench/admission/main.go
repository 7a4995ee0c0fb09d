// Command admission measures Kueue admission throughput with and without gpudra's topology
// admission check, in the same run, on a lab of simulated nodes (issue #5's benchmark):
//
//	go run ./test/bench/admission [-racks 10] [-nodes-per-rack 64] [-workloads 120]
//
// It starts a lab with Kueue and gpudra-controller, adds racks × nodes kwok nodes of 8 GPUs
// (DGX H100 profile; their ResourceSlices published by this program, as each node's plugin
// would), then submits gang Jobs of 2, 4 and 8 one-GPU pods, first to a ClusterQueue without
// the check (Kueue alone), then to one with gpudra.dev/topology (each gang kept in one rack),
// and reports workloads admitted per second and time-to-admission percentiles for both.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/test/lab"
)

var workloadsGVR = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}

func main() {
	racks := flag.Int("racks", 10, "racks of the simulated block")
	perRack := flag.Int("nodes-per-rack", 64, "8-GPU nodes per rack")
	n := flag.Int("workloads", 120, "gang workloads submitted per mode (sizes 2, 4, 8 pods in turn)")
	keep := flag.Bool("keep", false, "leave the lab running afterwards")
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
	fmt.Printf("\nAdmission of %d gang workloads (2/4/8 one-GPU pods) per mode, %d nodes × 8 GPUs (%d racks):\n\n", n, racks*perRack, racks)
	fmt.Println("| mode | admitted | workloads/s | p50 | p90 | p99 |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, r := range results {
		fmt.Printf("| %s | %d/%d | %.1f | %s | %s | %s |\n", r.mode, r.admitted, n, r.rate, r.p(50), r.p(90), r.p(99))
	}
	if results[0].rate > 0 {
		fmt.Printf("\ngpudra check / Kueue alone: %.2f× the throughput\n", results[1].rate/results[0].rate)
	}
	return nil
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
  namespaceSelector: {}%[2]s
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

// measure submits n gang Jobs to the mode's queue as fast as the API server takes them and
// watches their Kueue Workloads until all are admitted (or 10 minutes pass).
func measure(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, mode string, n int) (result, error) {
	ns := "bench-" + mode
	dyn := dynamic.NewForConfigOrDie(cfg)
	w, err := dyn.Resource(workloadsGVR).Namespace(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return result{}, err
	}
	defer w.Stop()
	submitted := map[string]time.Time{} // job name → submit time
	admitted := map[string]time.Time{}
	var mu sync.Mutex
	sizes := []int{2, 4, 8}
	start := time.Now()
	go func() {
		for i := range n {
			name := fmt.Sprintf("gang-%04d", i)
			mu.Lock()
			submitted[name] = time.Now()
			mu.Unlock()
			if err := apply(ctx, cfg, job(mode, i, sizes[i%len(sizes)])); err != nil {
				fmt.Fprintln(os.Stderr, "submit:", err)
			}
		}
	}()
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
			owner := ""
			for _, o := range u.GetOwnerReferences() {
				owner = o.Name
			}
			if _, seen := admitted[owner]; !seen && owner != "" {
				admitted[owner] = time.Now()
				last = admitted[owner]
			}
		case <-deadline:
			fmt.Fprintf(os.Stderr, "%s: %d of %d admitted after 10 minutes\n", mode, len(admitted), n)
			n = len(admitted)
		case <-ctx.Done():
			return result{}, ctx.Err()
		}
	}
	r := result{mode: mode, admitted: len(admitted)}
	mu.Lock()
	for job, at := range admitted {
		r.latency = append(r.latency, at.Sub(submitted[job]))
	}
	mu.Unlock()
	slices.Sort(r.latency)
	if el := last.Sub(start).Seconds(); el > 0 {
		r.rate = float64(r.admitted) / el
	}
	fmt.Fprintf(os.Stderr, "%s: %d workloads admitted in %s\n", mode, r.admitted, last.Sub(start).Round(time.Millisecond))
	return r, nil
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

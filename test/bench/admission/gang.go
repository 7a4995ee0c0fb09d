package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/simulated"
	"github.com/gpudra/gpudra/lab"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// The -gang mode measures one training gang end to end: a Job of pods × GPUs submitted to
// Kueue, from its creation until every pod is bound, in two rounds on one lab.
//
//   - Round A (gpudra): the Job goes to the ClusterQueue with the gpudra.dev/topology check,
//     its slices of one rack's worth of pods each kept in one rack, its pods gated until the
//     check pins them, scheduled by the lab's gpudra-scheduler on nodes that publish gpudra's
//     slices.
//   - Round B (baseline): the same Job through Kueue alone, scheduled by kube-scheduler (its
//     pods name a scheduler of their own, which this program starts for the round) on nodes
//     that publish plain slices (driver.PlainSlices) of the same GPUs.
//
// Each round has its own node set, a block of gangRackNodes-node racks, and its pods select
// that block (nodeSelector on topology.gpudra.dev/block). Round A runs first; its Job is
// deleted and its pods and claims awaited gone before round B starts (-baseline-first: B first).

const gangLabFile = `apiVersion: lab.gpudra.dev/v1alpha1
kind: Lab
scheduler: gpudra-scheduler
kueue: {enabled: true}
blocks:
- name: bench-plugins
  racks:
  - name: bench-plugins
    nodes:
    - {name: bench-plugin-node, profile: dgx-h100}
`

const (
	// gangRackNodes is how many 8-GPU nodes a rack of either node set has.
	gangRackNodes = 16
	// gangNodeGPUs is a DGX H100's GPUs.
	gangNodeGPUs = 8
	// baselineScheduler is the scheduler name of round B's pods, served by the kube-scheduler
	// this program starts.
	baselineScheduler = "gang-baseline"
)

// gangShape is the -gang flag: a Job of pods pods, each with one claim of gpus GPUs.
type gangShape struct{ pods, gpus int }

func (g gangShape) nodes() int { return g.pods * g.gpus / gangNodeGPUs }
func (g gangShape) racks() int { return g.nodes() / gangRackNodes }

// sliceSize is the pods of one rack: the slice the check keeps in one rack.
func (g gangShape) sliceSize() int { return gangRackNodes * gangNodeGPUs / g.gpus }

// parseGang reads -gang PODSxGPUS (128x8: 128 pods of 8 GPUs, 1 024 GPUs on 128 nodes).
func parseGang(v string) (gangShape, error) {
	p, g, ok := strings.Cut(strings.ToLower(strings.TrimSpace(v)), "x")
	pods, err1 := strconv.Atoi(p)
	gpus, err2 := strconv.Atoi(g)
	if !ok || err1 != nil || err2 != nil {
		return gangShape{}, fmt.Errorf("-gang %q: want PODSxGPUS, e.g. 128x8", v)
	}
	if !slices.Contains([]int{1, 2, 4, 8}, gpus) {
		return gangShape{}, fmt.Errorf("-gang %q: GPUs per pod %d: accepted 1, 2, 4, 8 (a DGX H100 has 8)", v, gpus)
	}
	s := gangShape{pods: pods, gpus: gpus}
	if pods < 1 || s.nodes()*gangNodeGPUs != pods*gpus || s.nodes()%gangRackNodes != 0 || s.nodes() > 1024 {
		return gangShape{}, fmt.Errorf("-gang %q: pods %d: accepted a count whose GPUs fill whole racks of %d nodes × 8 GPUs (a multiple of %d pods of %d GPUs), at most 1 024 nodes",
			v, pods, gangRackNodes, gangRackNodes*gangNodeGPUs/gpus, gpus)
	}
	return s, nil
}

// gangRound is one of the two rounds.
type gangRound struct {
	name      string // A or B
	mode      string // gpudra (the check, gpudra-scheduler, gpudra's slices) or kueue (baseline)
	set       string // the block of its nodes, and its namespace
	slices    string // gpudra or plain
	scheduler string // the scheduler that binds its pods
}

var gangRounds = []gangRound{
	{name: "A", mode: "gpudra", set: "gang-gpudra", slices: "gpudra", scheduler: lab.GpudraScheduler},
	{name: "B", mode: "kueue", set: "gang-plain", slices: "plain", scheduler: lab.KubeScheduler},
}

// gangJob is the round's Job: an Indexed Job of the gang's pods, each with one claim of
// shape.gpus GPUs. Round A's pods carry the check's annotations (the whole gang in one
// block, every slice of a rack's worth of pods in one rack) and its scheduling gate.
func gangJob(r gangRound, shape gangShape) string {
	meta, gate, sched := "", "", ""
	if r.mode == "gpudra" {
		meta = fmt.Sprintf(`
    metadata:
      annotations:
        gpudra.dev/required-topology: block
        gpudra.dev/slice-size: "%d"
        gpudra.dev/slice-required-topology: rack`, shape.sliceSize())
		gate = "\n      schedulingGates: [{name: gpudra.dev/placement}]"
	} else {
		sched = "\n      schedulerName: " + baselineScheduler
	}
	return fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata:
  name: gang
  namespace: %[1]s
  labels: {kueue.x-k8s.io/queue-name: q}
spec:
  completionMode: Indexed
  parallelism: %[2]d
  completions: %[2]d
  template:%[3]s
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 0%[4]s%[5]s
      nodeSelector: {%[6]s: %[1]s}
      resourceClaims: [{name: gpus, resourceClaimTemplateName: gpus}]
      containers:
      - name: worker
        image: registry.k8s.io/pause:3.10
        resources:
          requests: {cpu: "1"}
          claims: [{name: gpus}]
`, r.set, shape.pods, meta, gate, sched, api.LabelBlock)
}

// gangNamespace is the round's namespace, LocalQueue and claim template of shape.gpus GPUs.
func gangNamespace(r gangRound, shape gangShape) string {
	return fmt.Sprintf(`---
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
metadata: {name: gpus, namespace: %[1]s}
spec:
  spec:
    devices:
      requests:
      - {name: gpus, exactly: {deviceClassName: %[3]s, allocationMode: ExactCount, count: %[4]d}}
`, r.set, r.mode, api.DeviceClassGPU, shape.gpus)
}

// gangNodeName is node i of rack k of a round's set.
func gangNodeName(set string, rack, i int) string { return fmt.Sprintf("%s-r%d-n%02d", set, rack, i) }

// rackOfNode is the rack of a node named by gangNodeName ("" for another name).
func rackOfNode(set, node string) string {
	rest, ok := strings.CutPrefix(node, set+"-")
	if !ok {
		return ""
	}
	rack, _, ok := strings.Cut(rest, "-")
	if !ok {
		return ""
	}
	return rack
}

// slicesInOneRack counts the slices of sliceSize pods (by completion index) whose pods are
// all bound in one rack; index is each pod's completion index → its node.
func slicesInOneRack(set string, nodeOf map[int]string, pods, sliceSize int) int {
	kept := 0
	for s := 0; s*sliceSize < pods; s++ {
		racks := map[string]bool{}
		for i := s * sliceSize; i < min(pods, (s+1)*sliceSize); i++ {
			racks[rackOfNode(set, nodeOf[i])] = true
		}
		if len(racks) == 1 && !racks[""] {
			kept++
		}
	}
	return kept
}

func addGangNodes(ctx context.Context, cs kubernetes.Interface, r gangRound, shape gangShape) error {
	errs := make(chan error, shape.nodes())
	sem := make(chan struct{}, 16)
	for k := range shape.racks() {
		for i := range gangRackNodes {
			sem <- struct{}{}
			go func() {
				defer func() { <-sem }()
				errs <- addGangNode(ctx, cs, r, k, i)
			}()
		}
	}
	var err error
	for range shape.nodes() {
		err = errors.Join(err, <-errs)
	}
	return err
}

func addGangNode(ctx context.Context, cs kubernetes.Interface, r gangRound, rack, i int) error {
	name := gangNodeName(r.set, rack, i)
	rackName := fmt.Sprintf("%s-r%d", r.set, rack)
	if err := lab.AddKwokNode(ctx, cs, lab.Node{Name: name, Profile: "dgx-h100", Block: r.set, Rack: rackName, ToR: rackName,
		Resources: lab.NodeResources{CPU: "112", Memory: "2Ti", Pods: 110}}); err != nil {
		return err
	}
	inv, rs, err := simulated.Slices("dgx-h100", name, driver.RenderOptions{})
	if err == nil && r.slices == "plain" {
		rs, err = driver.PlainSlices(inv, name)
	}
	if err != nil {
		return err
	}
	for _, s := range rs {
		if _, err := cs.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
	}
	return nil
}

// gangStages are the round's stages, in order, as the report names them.
var gangStages = []string{"quota reserved", "check decided", "admitted", "pods created", "claims created", "scheduling gates removed", "first pod bound", "all pods bound"}

// gangResult is one round's measurement: when each stage was first seen complete, from the
// Job's creation, by watches on its Workload and pods.
type gangResult struct {
	gangRound
	at      map[string]time.Duration
	cpu     map[string]float64 // process → CPU seconds during the round
	peak    map[string]int     // process → peak resident memory during the round, KiB
	inRack  int                // slices whose pods are all in one rack
	slices  int
	hwmNote string
}

// gangOrder is the rounds in the order they run: A first, or with baselineFirst B first.
func gangOrder(baselineFirst bool) []gangRound {
	if baselineFirst {
		return []gangRound{gangRounds[1], gangRounds[0]}
	}
	return gangRounds
}

func runGang(ctx context.Context, shape gangShape, baselineFirst, keep bool) error {
	repo, err := lab.RepoRoot(".")
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "gpudra-bench-gang-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	lf := filepath.Join(tmp, "lab.yaml")
	if err := os.WriteFile(lf, []byte(gangLabFile), 0o600); err != nil {
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
	labState = state
	controllerState = state.Component("gpudra-controller")
	labSched := state.Component(lab.GpudraScheduler)
	if labSched == nil {
		return errors.New("the lab runs no gpudra-scheduler")
	}
	tc, err := lab.EnsureToolchain(ctx, os.Stderr, lab.ToolchainNeeds{})
	if err != nil {
		return err
	}
	cfg, err := state.RESTConfig()
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 200, 400
	cs := kubernetes.NewForConfigOrDie(cfg)

	start := time.Now()
	for _, r := range gangRounds {
		if err := addGangNodes(ctx, cs, r, shape); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "added 2 × %d nodes of 8 GPUs (%d racks of %d each) with their ResourceSlices in %s\n",
		shape.nodes(), shape.racks(), gangRackNodes, time.Since(start).Round(time.Second))
	// Both ClusterQueues admit at once (no hold): the clock runs from the Job's creation.
	q := strings.ReplaceAll(queues(4*shape.pods*shape.gpus), "stopPolicy: Hold", "stopPolicy: None")
	if err := apply(ctx, cfg, q); err != nil {
		return err
	}
	var results []gangResult
	for _, r := range gangOrder(baselineFirst) {
		if err := apply(ctx, cfg, gangNamespace(r, shape)); err != nil {
			return err
		}
		if err := waitServiceAccount(ctx, cs, r.set); err != nil {
			return err
		}
		var extra map[string]int // process → pid, besides the lab's
		stop := func() {}
		if r.scheduler == lab.KubeScheduler {
			pid, st, err := startBaselineScheduler(ctx, tmp, labSched.Argv, tc.Scheduler)
			if err != nil {
				return err
			}
			stop = st
			extra = map[string]int{lab.KubeScheduler: pid}
		}
		res, err := measureGang(ctx, cfg, cs, r, shape, extra)
		if err != nil {
			stop()
			return fmt.Errorf("round %s: %w", r.name, err)
		}
		results = append(results, res)
		if r.mode == "gpudra" && controllerState != nil && controllerState.Ports["metrics"] > 0 {
			fmt.Fprintln(os.Stderr, "gpudra-controller after round A:")
			for _, line := range controllerMetrics(ctx, controllerState.Ports["metrics"]) {
				fmt.Fprintln(os.Stderr, "    "+line)
			}
		}
		t := time.Now()
		err = cleanUp(ctx, cfg, cs, r.set, "jobs")
		stop()
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "round %s: deleted, its pods and claims gone, in %s\n", r.name, time.Since(t).Round(time.Second))
	}
	profiling.Wait()
	reportGang(os.Stdout, shape, results)
	return nil
}

func waitServiceAccount(ctx context.Context, cs kubernetes.Interface, ns string) error {
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("namespace %s has no default ServiceAccount: %w", ns, err)
	}
	return nil
}

// gangProcesses are the processes whose CPU and peak memory the report gives.
var gangProcesses = []string{"kube-apiserver", "kueue", "gpudra-controller", lab.GpudraScheduler, lab.KubeScheduler}

// measureGang creates the round's Job and watches its Workload and pods until every pod is
// bound (or 10 minutes pass).
func measureGang(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, r gangRound, shape gangShape, extra map[string]int) (gangResult, error) {
	res := gangResult{gangRound: r, at: map[string]time.Duration{}, cpu: map[string]float64{}, peak: map[string]int{}}
	pids := map[string]int{}
	for _, c := range labState.Components {
		if slices.Contains(gangProcesses, c.Name) {
			pids[c.Name] = c.PID
		}
	}
	for name, pid := range extra {
		pids[name] = pid
	}
	var j batchv1.Job
	if err := yaml.UnmarshalStrict([]byte(gangJob(r, shape)), &j); err != nil {
		return res, err
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	wls := dyn.Resource(workloadsGVR).Namespace(r.set)
	wlList, err := wls.List(ctx, metav1.ListOptions{})
	if err != nil {
		return res, err
	}
	podList, err := cs.CoreV1().Pods(r.set).List(ctx, metav1.ListOptions{})
	if err != nil {
		return res, err
	}
	ww, err := watchtools.NewRetryWatcherWithContext(ctx, wlList.GetResourceVersion(), &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return wls.Watch(ctx, o) },
	})
	if err != nil {
		return res, err
	}
	defer ww.Stop()
	claimList, err := cs.ResourceV1().ResourceClaims(r.set).List(ctx, metav1.ListOptions{})
	if err != nil {
		return res, err
	}
	cw, err := watchtools.NewRetryWatcherWithContext(ctx, claimList.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cs.ResourceV1().ResourceClaims(r.set).Watch(ctx, o)
		},
	})
	if err != nil {
		return res, err
	}
	defer cw.Stop()
	pw, err := watchtools.NewRetryWatcherWithContext(ctx, podList.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cs.CoreV1().Pods(r.set).Watch(ctx, o)
		},
	})
	if err != nil {
		return res, err
	}
	defer pw.Stop()

	// Peak memory per round: writing 5 to clear_refs resets a process's VmHWM to its
	// current resident size (Linux 4.0 and later).
	for name, pid := range pids {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
			res.hwmNote = fmt.Sprintf("%s's peak memory could not be reset (%v): it is the peak since it started", name, err)
		}
	}
	before := map[string]float64{}
	for name, pid := range pids {
		before[name] = cpuSeconds(pid)
	}
	machine := sampleCPU()
	if r.mode == "gpudra" && cpuProfile != "" {
		profiling.Go(func() { profileController(ctx, cpuProfile+".gang") })
	}
	t0 := time.Now()
	if _, err := cs.BatchV1().Jobs(r.set).Create(ctx, &j, metav1.CreateOptions{}); err != nil {
		return res, fmt.Errorf("create the Job: %w", err)
	}
	mark := func(stage string) {
		if _, seen := res.at[stage]; !seen {
			res.at[stage] = time.Since(t0)
			fmt.Fprintf(os.Stderr, "round %s: %s after %s\n", r.name, stage, res.at[stage].Round(time.Millisecond))
		}
	}
	created, ungated, bound, claims := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
	nodeOf := map[int]string{}
	timeout := time.After(10 * time.Minute)
	for len(bound) < shape.pods {
		select {
		case ev, ok := <-ww.ResultChan():
			if !ok {
				return res, errors.New("workload watch ended")
			}
			u, isU := ev.Object.(*unstructured.Unstructured)
			if !isU || ev.Type == watch.Deleted {
				continue
			}
			if conditionTrue(u, "QuotaReserved") {
				mark("quota reserved")
			}
			if checksReady(u) {
				mark("check decided")
			}
			if conditionTrue(u, "Admitted") {
				mark("admitted")
			}
		case ev, ok := <-cw.ResultChan():
			if !ok {
				return res, errors.New("claim watch ended")
			}
			if c, isClaim := ev.Object.(*resourceapi.ResourceClaim); isClaim && ev.Type == watch.Added {
				claims[c.Name] = true
				if len(claims) == shape.pods {
					mark("claims created")
				}
			}
		case ev, ok := <-pw.ResultChan():
			if !ok {
				return res, errors.New("pod watch ended")
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if !isPod || ev.Type == watch.Deleted {
				continue
			}
			created[p.Name] = true
			if len(created) == shape.pods {
				mark("pods created")
			}
			if len(p.Spec.SchedulingGates) == 0 {
				ungated[p.Name] = true
				if r.mode == "gpudra" && len(ungated) == shape.pods {
					mark("scheduling gates removed")
				}
			}
			if p.Spec.NodeName != "" {
				bound[p.Name] = true
				mark("first pod bound")
				if i, err := strconv.Atoi(p.Annotations[batchv1.JobCompletionIndexAnnotation]); err == nil {
					nodeOf[i] = p.Spec.NodeName
				}
			}
		case <-timeout:
			return res, fmt.Errorf("%d of %d pods bound 10 minutes after the Job's creation", len(bound), shape.pods)
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
	mark("all pods bound")
	for name, pid := range pids {
		res.cpu[name] = cpuSeconds(pid) - before[name]
		res.peak[name] = peakKiB(pid)
	}
	fmt.Fprintf(os.Stderr, "round %s: %s\n", r.name, cpuSince(machine))
	res.slices = shape.pods / shape.sliceSize()
	res.inRack = slicesInOneRack(r.set, nodeOf, shape.pods, shape.sliceSize())
	return res, nil
}

func conditionTrue(u *unstructured.Unstructured, kind string) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == kind && m["status"] == "True" {
			return true
		}
	}
	return false
}

// checksReady says whether the Workload has admission checks and all are Ready.
func checksReady(u *unstructured.Unstructured) bool {
	checks, _, _ := unstructured.NestedSlice(u.Object, "status", "admissionChecks")
	for _, c := range checks {
		m, _ := c.(map[string]any)
		if m["state"] != "Ready" {
			return false
		}
	}
	return len(checks) > 0
}

// cpuSeconds is a process's user and system CPU time so far.
func cpuSeconds(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	return (u + k) / clockTicks
}

// peakKiB is a process's VmHWM (peak resident memory), in KiB.
func peakKiB(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	return vmHWM(string(data))
}

// vmHWM reads VmHWM from the text of /proc/<pid>/status.
func vmHWM(status string) int {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}

// startBaselineScheduler runs kube-scheduler for round B's scheduler name, with the lab
// scheduler's flags and credentials and a port of its own, and waits until it is ready.
func startBaselineScheduler(ctx context.Context, tmp string, labArgv []string, binary string) (int, func(), error) {
	var kubeconfig string
	for _, a := range labArgv {
		if v, ok := strings.CutPrefix(a, "--kubeconfig="); ok {
			kubeconfig = v
		}
	}
	config := map[string]any{
		"apiVersion":       "kubescheduler.config.k8s.io/v1",
		"kind":             "KubeSchedulerConfiguration",
		"clientConnection": map[string]any{"kubeconfig": kubeconfig},
		"leaderElection":   map[string]any{"leaderElect": false},
		"profiles":         []any{map[string]any{"schedulerName": baselineScheduler}},
	}
	data, err := yaml.Marshal(config)
	if err != nil {
		return 0, nil, err
	}
	path := filepath.Join(tmp, "kube-scheduler.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return 0, nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	args := []string{"--config=" + path, "--secure-port=" + strconv.Itoa(port)}
	for _, a := range labArgv[1:] {
		if !strings.HasPrefix(a, "--config=") && !strings.HasPrefix(a, "--secure-port=") {
			args = append(args, a)
		}
	}
	logFile, err := os.Create(filepath.Join(tmp, "kube-scheduler.log"))
	if err != nil {
		return 0, nil, err
	}
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return 0, nil, fmt.Errorf("start %s: %w", binary, err)
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		logFile.Close()
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the scheduler's own self-signed serving certificate, on loopback
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/readyz", port))
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		stop()
		return 0, nil, fmt.Errorf("kube-scheduler not ready within a minute (log %s): %w", logFile.Name(), err)
	}
	return cmd.Process.Pid, stop, nil
}

func reportGang(w *os.File, shape gangShape, results []gangResult) {
	fmt.Fprintf(w, "\nOne Job of %d pods × %d GPUs (%d GPUs), %d nodes of 8 GPUs per round in %d racks of %d; slices of %d pods:\n\n",
		shape.pods, shape.gpus, shape.pods*shape.gpus, shape.nodes(), shape.racks(), gangRackNodes, shape.sliceSize())
	fmt.Fprint(w, "| stage (from the Job's creation) |")
	for _, r := range results {
		fmt.Fprintf(w, " %s: %s |", r.name, gangRoundTitle(r.gangRound))
	}
	fmt.Fprint(w, "\n|---|")
	for range results {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	for _, st := range gangStages {
		fmt.Fprintf(w, "| %s |", st)
		for _, r := range results {
			if d, ok := r.at[st]; ok {
				fmt.Fprintf(w, " %.1f s |", d.Seconds())
			} else {
				fmt.Fprint(w, " - |")
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprint(w, "| slices in one rack |")
	for _, r := range results {
		fmt.Fprintf(w, " %d of %d |", r.inRack, r.slices)
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, "\n| process: CPU s, peak memory (VmHWM) |")
	for _, r := range results {
		fmt.Fprintf(w, " %s |", r.name)
	}
	fmt.Fprint(w, "\n|---|")
	for range results {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	for _, p := range gangProcesses {
		fmt.Fprintf(w, "| %s |", p)
		for _, r := range results {
			if _, ok := r.cpu[p]; ok {
				fmt.Fprintf(w, " %.1f s, %d MiB |", r.cpu[p], r.peak[p]/1024)
			} else {
				fmt.Fprint(w, " - |")
			}
		}
		fmt.Fprintln(w)
	}
	for _, r := range results {
		if r.hwmNote != "" {
			fmt.Fprintf(w, "\nround %s: %s\n", r.name, r.hwmNote)
		}
	}
	at := map[string]time.Duration{}
	for _, r := range results {
		at[r.name] = r.at["all pods bound"]
	}
	if at["A"] > 0 && at["B"] > 0 {
		fmt.Fprintf(w, "\nall pods bound (round %s ran first): A %.1f s, B %.1f s: A/B = %.2f× (goal: at most 1.5×)\n",
			results[0].name, at["A"].Seconds(), at["B"].Seconds(), at["A"].Seconds()/at["B"].Seconds())
	}
}

func gangRoundTitle(r gangRound) string {
	if r.mode == "gpudra" {
		return "Kueue + gpudra check, gpudra-scheduler, gpudra's slices"
	}
	return "Kueue alone, kube-scheduler, plain slices"
}

package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
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

	"github.com/gpudra/gpudra/lab"
	"github.com/gpudra/gpudra/test/bench/internal/benchlab"
	"github.com/gpudra/gpudra/test/bench/internal/proc"
)

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

// roundsLab is the lab of the two-round modes (-gang, -stream): its gpudra-scheduler, the
// toolchain (for round B's kube-scheduler), a client, and a scratch folder.
type roundsLab struct {
	sched *lab.Component
	tc    *lab.Toolchain
	cfg   *rest.Config
	cs    *kubernetes.Clientset
	tmp   string
}

// upRoundsLab brings up gangLabFile's lab; close tears it down (unless keep) and removes
// the scratch folder.
func upRoundsLab(ctx context.Context, keep bool) (roundsLab, func(), error) {
	var l roundsLab
	state, down, err := benchlab.Up(ctx, withWholeGPUQuota(gangLabFile), keep)
	if err != nil {
		return l, nil, err
	}
	// A scratch folder for the baseline scheduler's configuration.
	if l.tmp, err = os.MkdirTemp("", "gpudra-bench-rounds-"); err != nil {
		down()
		return l, nil, err
	}
	closeLab := func() { os.RemoveAll(l.tmp); down() }
	labState = state
	controllerState = state.Component("gpudra-controller")
	if l.sched = state.Component(lab.GpudraScheduler); l.sched == nil {
		closeLab()
		return l, nil, errors.New("the lab runs no gpudra-scheduler")
	}
	if l.tc, err = lab.EnsureToolchain(ctx, os.Stderr, lab.ToolchainNeeds{}); err == nil {
		l.cfg, err = state.RESTConfig()
	}
	if err != nil {
		closeLab()
		return l, nil, err
	}
	l.cfg.QPS, l.cfg.Burst = 200, 400
	l.cs = kubernetes.NewForConfigOrDie(l.cfg)
	return l, closeLab, nil
}

func runGang(ctx context.Context, shape gangShape, baselineFirst, keep bool) error {
	l, closeLab, err := upRoundsLab(ctx, keep)
	if err != nil {
		return err
	}
	defer closeLab()
	cfg, cs, tmp, labSched, tc := l.cfg, l.cs, l.tmp, l.sched, l.tc

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
		printControllerMetrics(ctx, r)
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

// roundProcesses are the pids of the processes a round measures: gangProcesses of the lab's,
// and extra.
func roundProcesses(extra map[string]int) map[string]int {
	pids := map[string]int{}
	for _, c := range labState.Components {
		if slices.Contains(gangProcesses, c.Name) {
			pids[c.Name] = c.PID
		}
	}
	maps.Copy(pids, extra)
	return pids
}

// startRound resets each process's peak memory (writing 5 to clear_refs resets VmHWM to
// the current resident size, Linux 4.0 and later) and reads its CPU time so far; note says
// which peak could not be reset.
func startRound(pids map[string]int) (cpu map[string]float64, note string) {
	cpu = map[string]float64{}
	for name, pid := range pids {
		if err := proc.ResetPeak(pid); err != nil {
			note = fmt.Sprintf("%s's peak memory could not be reset (%v): it is the peak since it started", name, err)
		}
		cpu[name] = proc.CPUSeconds(pid)
	}
	return cpu, note
}

// endRound is each process's CPU seconds since startRound and its peak memory, in KiB.
func endRound(pids map[string]int, before map[string]float64) (map[string]float64, map[string]int) {
	cpu, peak := map[string]float64{}, map[string]int{}
	for name, pid := range pids {
		cpu[name] = proc.CPUSeconds(pid) - before[name]
		peak[name] = proc.PeakKiB(pid)
	}
	return cpu, peak
}

// gangProcesses are the processes whose CPU and peak memory the report gives.
var gangProcesses = []string{"kube-apiserver", "kueue", "gpudra-controller", lab.GpudraScheduler, lab.KubeScheduler}

// measureGang creates the round's Job and watches its Workload and pods until every pod is
// bound (or 10 minutes pass).
func measureGang(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, r gangRound, shape gangShape, extra map[string]int) (gangResult, error) {
	res := gangResult{gangRound: r, at: map[string]time.Duration{}, cpu: map[string]float64{}, peak: map[string]int{}}
	pids := roundProcesses(extra)
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

	before, hwmNote := startRound(pids)
	res.hwmNote = hwmNote
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
	res.cpu, res.peak = endRound(pids, before)
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

// Command scheduler measures how fast kube-scheduler and gpudra-scheduler schedule pods
// whose claims come from ResourceClaimTemplates, on gpudra's ResourceSlices and on plain
// slices of the same GPUs, in one run on one lab, in the spirit of kube-scheduler's
// scheduler_perf (SchedulingThroughput):
//
//	go run ./test/bench/scheduler [-nodes 100] [-pods 600] [-publish all]
//
// It starts a lab (gpudra-scheduler built from this repository), adds four sets of -nodes
// kwok nodes of 8 H100 GPUs: two with the slices gpudra's plugin publishes for a DGX H100
// (whole GPUs, shares, NVLink groups, per-GPU counters), two with plain
// slices (the same eight whole GPUs and attributes in one slice, no counters, shares, MIG
// devices or groups: what a driver that hands out whole GPUs publishes). Each round creates
// -pods pods asking for one whole GPU (gpu.gpudra.dev) through a claim template, pinned to
// its node set, for a scheduler name no scheduler serves yet; once every pod's claim exists,
// it starts the round's scheduler (the toolchain's kube-scheduler, or bin/gpudra-scheduler
// with the shipped GPUFragmentation profile) for that name, and records when each pod is
// bound. Throughput is bound pods over the time from the first bind to the last; the
// report gives each round's pods/s, the scheduler's CPU per pod over the same span and its
// peak memory, and their ratios to kube-scheduler on plain slices and on the same slices.
// -publish renders the gpudra node sets as a node pool with that --publish would publish
// them (training: whole GPUs and NVLink groups; whole: whole GPUs only).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/simulated"
	"github.com/gpudra/gpudra/lab"
	"github.com/gpudra/gpudra/test/bench/internal/benchlab"
	"github.com/gpudra/gpudra/test/bench/internal/proc"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

const (
	labFile = `apiVersion: lab.gpudra.dev/v1alpha1
kind: Lab
scheduler: gpudra-scheduler
blocks:
- name: bench-plugins
  racks:
  - name: bench-plugins
    nodes:
    - {name: bench-plugin-node, profile: dgx-h100}
`
	profile = "dgx-h100"
	// benchScheduler is the scheduler name of every round's pods; only the round's own
	// scheduler serves it, and only once the round's pods and claims exist.
	benchScheduler = "bench"
)

// round is one measurement: a scheduler on one kind of slices.
type round struct {
	scheduler string // kube-scheduler | gpudra-scheduler
	slices    string // gpudra | plain
}

func (r round) set() string { return "bench-" + r.scheduler + "-" + r.slices }

var rounds = []round{
	{"kube-scheduler", "plain"}, {"kube-scheduler", "gpudra"},
	{"gpudra-scheduler", "plain"}, {"gpudra-scheduler", "gpudra"},
}

func main() {
	nodes := flag.Int("nodes", 100, "kwok nodes of 8 GPUs in each round's node set (four sets)")
	pods := flag.Int("pods", 600, "one-GPU pods each round schedules (at most 8 × -nodes)")
	keep := flag.Bool("keep", false, "leave the lab running afterwards")
	publish := flag.String("publish", string(driver.PublishAll), "what the gpudra node sets publish, as the plugin's --publish: all, training or whole")
	flag.Parse()
	var err error
	if gpudraRender, err = driver.Publication(*publish).Options(driver.RenderOptions{}); err != nil {
		fmt.Fprintf(os.Stderr, "scheduler benchmark: -publish: %v\n", err)
		os.Exit(2)
	}
	if *nodes < 1 || *nodes > 1000 {
		fmt.Fprintf(os.Stderr, "scheduler benchmark: -nodes %d: accepted 1 to 1000\n", *nodes)
		os.Exit(2)
	}
	if *pods < 2 || *pods > 8**nodes {
		fmt.Fprintf(os.Stderr, "scheduler benchmark: -pods %d: accepted 2 to 8 × -nodes (%d)\n", *pods, 8**nodes)
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, *nodes, *pods, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "scheduler benchmark:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, nodes, pods int, keep bool) error {
	state, down, err := benchlab.Up(ctx, labFile, keep)
	if err != nil {
		return err
	}
	defer down()
	// A scratch folder for the baseline scheduler's configuration.
	tmp, err := os.MkdirTemp("", "gpudra-bench-scheduler-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	tc, err := lab.EnsureToolchain(ctx, os.Stderr, lab.ToolchainNeeds{})
	if err != nil {
		return err
	}
	labSched := state.Component(lab.GpudraScheduler)
	if labSched == nil {
		return errors.New("the lab runs no gpudra-scheduler")
	}
	binaries := map[string]string{"kube-scheduler": tc.Scheduler, "gpudra-scheduler": labSched.Argv[0]}
	cfg, err := state.RESTConfig()
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 500, 1000
	cs := kubernetes.NewForConfigOrDie(cfg)

	start := time.Now()
	for _, r := range rounds {
		if err := addNodes(ctx, cs, r, nodes); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "added %d nodes of 8 GPUs with their ResourceSlices in %s\n", len(rounds)*nodes, time.Since(start).Round(time.Second))

	var results []result
	for _, r := range rounds {
		res, err := measure(ctx, cs, r, pods, tmp, labSched.Argv, binaries[r.scheduler])
		if err != nil {
			return fmt.Errorf("%s on %s slices: %w", r.scheduler, r.slices, err)
		}
		fmt.Fprintf(os.Stderr, "%s on %s slices: %d pods in %s, %.1f pods/s\n", r.scheduler, r.slices, res.pods, res.span.Round(time.Millisecond), res.rate())
		results = append(results, res)
	}
	report(os.Stdout, nodes, pods, results)
	return nil
}

// addNodes creates a round's kwok nodes, labelled with its set, and publishes each one's
// ResourceSlices as its plugin would (gpudra's) or as a whole-GPU driver would (plain).
func addNodes(ctx context.Context, cs kubernetes.Interface, r round, n int) error {
	return inParallel(ctx, n, func(ctx context.Context, i int) error {
		return addNode(ctx, cs, r, fmt.Sprintf("%s-%03d", r.set(), i))
	})
}

// inParallel runs fn for 0..n-1, 16 at a time, and returns the first error.
func inParallel(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error { return fn(ctx, i) })
	}
	return g.Wait()
}

func addNode(ctx context.Context, cs kubernetes.Interface, r round, name string) error {
	if err := lab.AddKwokNode(ctx, cs, lab.Node{Name: name, Profile: profile, Block: r.set(), Rack: r.set(), ToR: r.set(),
		Resources: lab.NodeResources{CPU: "112", Memory: "2Ti", Pods: 110}}); err != nil {
		return err
	}
	rs, err := nodeSlices(name, r.slices)
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

// gpudraRender is what the gpudra node sets publish (-publish).
var gpudraRender driver.RenderOptions

// nodeSlices renders a node's slices: gpudra's for the profile, or driver.PlainSlices of the
// same GPUs.
func nodeSlices(node, kind string) ([]*resourceapi.ResourceSlice, error) {
	inv, rs, err := simulated.Slices(profile, node, gpudraRender)
	if err != nil || kind == "gpudra" {
		return rs, err
	}
	return driver.PlainSlices(inv, node)
}

type result struct {
	round
	pods int
	span time.Duration // first bind to last bind
	// cpu is the scheduler's CPU seconds from the first bind to the last, as the bench saw
	// them; peakKiB its peak resident memory over the round.
	cpu     float64
	peakKiB int
}

// cpuPerPod is the scheduler's CPU milliseconds per pod bound after the first.
func (r result) cpuPerPod() float64 {
	if r.pods < 2 {
		return 0
	}
	return 1000 * r.cpu / float64(r.pods-1)
}

func (r result) rate() float64 {
	if r.span <= 0 {
		return 0
	}
	return float64(r.pods-1) / r.span.Seconds()
}

// measure creates the round's pods and claims, then starts its scheduler and waits until
// every pod is bound.
func measure(ctx context.Context, cs kubernetes.Interface, r round, n int, tmp string, labArgv []string, binary string) (result, error) {
	ns := r.set()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return result{}, err
	}
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "one-gpu", Namespace: ns},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: api.DeviceClassGPU, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}},
		}}},
	}
	if _, err := cs.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		return result{}, err
	}
	// Pods are admitted once the namespace's default ServiceAccount exists.
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return result{}, fmt.Errorf("namespace %s has no default ServiceAccount: %w", ns, err)
	}
	if err := createPods(ctx, cs, ns, n); err != nil {
		return result{}, err
	}
	// The claims come from kube-controller-manager; the scheduler starts once all exist, so
	// that it schedules a backlog rather than waiting for claims.
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		claims, err := cs.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(claims.Items) == n, nil
	}); err != nil {
		return result{}, fmt.Errorf("waiting for %d claims made from the template: %w", n, err)
	}
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return result{}, err
	}
	// A watch the server ends is resumed where it stopped.
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cs.CoreV1().Pods(ns).Watch(ctx, o)
		},
	})
	if err != nil {
		return result{}, err
	}
	defer w.Stop()
	pid, stop, err := startScheduler(ctx, r, tmp, labArgv, binary)
	if err != nil {
		return result{}, err
	}
	defer stop()
	bound := map[string]time.Time{}
	var cpuAtFirst float64
	timeout := time.After(10 * time.Minute)
	for len(bound) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return result{}, fmt.Errorf("pod watch ended with %d of %d pods bound", len(bound), n)
			}
			if p, isPod := ev.Object.(*corev1.Pod); isPod && ev.Type != watch.Deleted && p.Spec.NodeName != "" {
				if _, seen := bound[p.Name]; !seen {
					bound[p.Name] = time.Now()
					if len(bound) == 1 {
						cpuAtFirst = proc.CPUSeconds(pid)
					}
				}
			}
		case <-timeout:
			return result{}, fmt.Errorf("%d of %d pods bound after 10 minutes", len(bound), n)
		case <-ctx.Done():
			return result{}, ctx.Err()
		}
	}
	times := slices.SortedFunc(func(yield func(time.Time) bool) {
		for _, t := range bound {
			if !yield(t) {
				return
			}
		}
	}, time.Time.Compare)
	return result{round: r, pods: n, span: times[len(times)-1].Sub(times[0]),
		cpu: proc.CPUSeconds(pid) - cpuAtFirst, peakKiB: proc.PeakKiB(pid)}, nil
}

func createPods(ctx context.Context, cs kubernetes.Interface, ns string, n int) error {
	return inParallel(ctx, n, func(ctx context.Context, i int) error {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, pod(ns, i), metav1.CreateOptions{})
		return err
	})
}

func pod(ns string, i int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%04d", i), Namespace: ns},
		Spec: corev1.PodSpec{
			SchedulerName:  benchScheduler,
			NodeSelector:   map[string]string{api.LabelBlock: ns},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")}},
			Containers: []corev1.Container{{Name: "c", Image: "bench",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
		},
	}
}

// startScheduler runs the round's scheduler with the lab scheduler's flags and credentials,
// a port of its own, and one profile for the bench's scheduler name: kube-scheduler's
// defaults, or gpudra-scheduler's shipped GPUFragmentation profile. Its client is not rate
// limited (as in scheduler_perf), so that the API client does not cap the throughput. It
// returns the scheduler's process ID and a function that stops it.
func startScheduler(ctx context.Context, r round, tmp string, labArgv []string, binary string) (int, func(), error) {
	kubeconfig := flagValue(labArgv, "--kubeconfig")
	prof := map[string]any{"schedulerName": benchScheduler}
	if r.scheduler == "gpudra-scheduler" {
		var shipped struct {
			Profiles []map[string]any `json:"profiles"`
		}
		if err := yaml.Unmarshal(deployments.SchedulerConfiguration, &shipped); err != nil || len(shipped.Profiles) == 0 {
			return 0, nil, fmt.Errorf("shipped scheduler configuration: %v", err)
		}
		prof = shipped.Profiles[0]
		prof["schedulerName"] = benchScheduler
	}
	config := map[string]any{
		"apiVersion":       "kubescheduler.config.k8s.io/v1",
		"kind":             "KubeSchedulerConfiguration",
		"clientConnection": map[string]any{"kubeconfig": kubeconfig, "qps": 5000, "burst": 5000},
		"leaderElection":   map[string]any{"leaderElect": false},
		"profiles":         []any{prof},
	}
	data, err := yaml.Marshal(config)
	if err != nil {
		return 0, nil, err
	}
	path := filepath.Join(tmp, r.set()+".yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return 0, nil, err
	}
	port, err := freePort()
	if err != nil {
		return 0, nil, err
	}
	args := []string{"--config=" + path, "--secure-port=" + strconv.Itoa(port)}
	for _, a := range labArgv[1:] {
		if !strings.HasPrefix(a, "--config=") && !strings.HasPrefix(a, "--secure-port=") {
			args = append(args, a)
		}
	}
	log, err := os.Create(filepath.Join(tmp, r.set()+".log"))
	if err != nil {
		return 0, nil, err
	}
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return 0, nil, fmt.Errorf("start %s: %w", binary, err)
	}
	return cmd.Process.Pid, func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		log.Close()
	}, nil
}

func flagValue(argv []string, name string) string {
	for _, a := range argv {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func report(w io.Writer, nodes, pods int, results []result) {
	kube := map[string]result{} // kube-scheduler's round on each kind of slices
	for _, r := range results {
		if r.scheduler == "kube-scheduler" {
			kube[r.slices] = r
		}
	}
	fmt.Fprintf(w, "\n%d nodes of 8 GPUs per round, %d one-GPU pods per round (claims from a template); gpudra's slices: %d devices a node\n\n", nodes, pods, devicesPerNode())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scheduler\tslices\tpods/s\tx kube-scheduler on plain\tx kube-scheduler on same slices\tCPU ms/pod\tCPU x kube-scheduler on same slices\tpeak MiB\t")
	for _, r := range results {
		same := kube[r.slices]
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%s\t%s\t%.2f\t%s\t%d\t\n", r.scheduler, r.slices, r.rate(),
			ratio(r.rate(), kube["plain"].rate()), ratio(r.rate(), same.rate()),
			r.cpuPerPod(), ratio(r.cpuPerPod(), same.cpuPerPod()), r.peakKiB/1024)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nCPU is the scheduler process's user and system time from the first bind to the last, over the pods bound after the first.")
}

// ratio is a over b to two places, or n/a without b.
func ratio(a, b float64) string {
	if b <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// devicesPerNode is how many devices a gpudra node set's node publishes.
func devicesPerNode() int {
	rs, err := nodeSlices("count", "gpudra")
	if err != nil {
		return 0
	}
	n := 0
	for _, s := range rs {
		n += len(s.Spec.Devices)
	}
	return n
}

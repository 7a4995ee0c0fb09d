//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/kubeletplugin"
	"github.com/gpudra/gpudra/kubeletplugin/usage"
	"github.com/gpudra/gpudra/lab"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// gpuProcess is one line of a simulated node's processes file: a compute process NVML
// reports on a GPU, and the claim it runs for ("" for none).
type gpuProcess struct {
	gpu    string
	pid    int
	memory resource.Quantity
	sm     int
	claim  string
}

func (p gpuProcess) String() string {
	return fmt.Sprintf("gpu=%s pid=%d memory=%s sm=%d", p.gpu, p.pid, p.memory.String(), p.sm)
}

// usageClaim is one share claim of the test and what its tier reserves and caps.
type usageClaim struct {
	name, memory, compute string
	limits                string // the GpuConfig's limits
	guarantee, cap        int    // percent of the GPU, as the tier says
	gpu                   string // the allocated GPU's index
	device                string // the allocated device and share
	shareID               string
}

// TestRealNodeShareUsageFollowsTheClaimsProcesses: with the chart's kubeletPlugin.shareUsage
// (the plugin in the node's PID namespace, with the kubelet's PodResources socket), the GPU
// processes of two pods on the real node, each with a share claim on a GPU of its own, are
// seen per claim where a user looks: the plugin's metrics
// (gpudra_plugin_claim_memory_used_bytes, _sm_utilization_percent, _processes, and the
// claim's memory limit, compute guarantee and cap) for exactly those claims, with the values
// NVML reports; the claims' status.devices data; and `gpudra explain claim/NAME`. A process
// outside any pod, and one of a pod on a GPU none of its claims has, count as unclaimed
// (gpudra_plugin_gpu_unclaimed_processes). When the processes change (one goes, another
// grows), all three follow. The node's GPUs are simulated, so NVML's processes are the lines
// of the plugin's processes file; the PIDs are those of the pods' real containers.
func TestRealNodeShareUsageFollowsTheClaimsProcesses(t *testing.T) {
	inLane(t, realNodeLane)
	node := realNode(t)
	ctx := t.Context()
	restoreRealNodePluginAtEnd(t, node)
	// What kubeletPlugin.shareUsage=true renders: hostPID and the kubelet's pod-resources
	// folder at /var/lib/kubelet/pod-resources (where the plugin looks for the socket). The
	// lab's kubelet keeps that folder under its own root directory.
	podResources := filepath.Join(filepath.Dir(state.KubeletRegistryDir(node)), "pod-resources")
	if _, err := os.Stat(filepath.Join(podResources, "kubelet.sock")); err != nil {
		t.Fatalf("the real node's kubelet serves no PodResources socket: %v", err)
	}
	err := updateRealNodePlugin(t, ctx, node, "kubeletPlugin.shareUsage (hostPID, the kubelet's pod-resources socket)", func(s *corev1.PodSpec) {
		s.HostPID = true
		setHostPathMount(s, "pod-resources", podResources, corev1.HostPathDirectory, filepath.Dir(usage.DefaultPodResourcesSocket), true)
	})
	if err != nil {
		t.Fatal(err)
	}
	plugin := realNodePluginPod(t, node)
	args := append(slices.Clone(plugin.Spec.Containers[0].Command), plugin.Spec.Containers[0].Args...)
	dataDir, metricsAddr := flagOf(args, "plugin-data-dir"), flagOf(args, "metrics-bind-address")
	if dataDir == "" || metricsAddr == "" {
		t.Fatalf("the real node's plugin runs without --plugin-data-dir or --metrics-bind-address: %q", args)
	}
	// The simulated GPUs' processes (nvmlsim.SetProcessesFile): a host path, which the
	// plugin's container mounts at the same path.
	processesFile := filepath.Join(dataDir, "processes")
	writeProcesses := func(procs []gpuProcess) {
		t.Helper()
		var b strings.Builder
		for _, p := range procs {
			fmt.Fprintln(&b, p)
		}
		tmp := processesFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, processesFile); err != nil {
			t.Fatal(err)
		}
		t.Logf("the node's GPU processes:\n%s", b.String())
	}
	if err := os.Remove(processesFile); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(processesFile) })

	ns := namespace(t, "share-usage")
	tier := func(limits string) string {
		return `{"apiVersion": "gpu.gpudra.dev/v1alpha1", "kind": "GpuConfig", "limits": ` + limits + `}`
	}
	claims := []*usageClaim{
		{name: "alpha", memory: "4Gi", compute: "30", limits: `{"policy": "Fixed"}`, guarantee: 30, cap: 30},
		{name: "beta", memory: "2Gi", compute: "20", limits: `{"policy": "Guaranteed", "computeLimit": 60}`, guarantee: 20, cap: 60},
	}
	devices := map[string]resourcev1.Device{}
	var alphaUUID string
	for _, c := range claims {
		cel := ""
		if alphaUUID != "" { // beta on another GPU than alpha
			cel = fmt.Sprintf(`device.attributes["gpu.gpudra.dev"].uuid != %q`, alphaUUID)
		}
		claim := withConfig(claimOf(ns, c.name, api.DeviceClassShare, map[string]string{"memory": c.memory, "compute": c.compute}, cel), tier(c.limits))
		if _, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := lab.RealNodePod(ns, c.name, node, []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(c.name)}})
		if _, err := client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		probeOutput(t, ns, c.name)
		res, err := allocated(ctx, ns, c.name)
		if err != nil || len(res) != 1 || res[0].Pool != node || res[0].ShareID == nil {
			t.Fatalf("claim %s: want one share of node %s, got %v (%v)", c.name, node, res, err)
		}
		if len(devices) == 0 {
			devices = publishedDevices(ctx, t)
		}
		d := devices[node+"/"+res[0].Device]
		c.device, c.shareID, c.gpu = res[0].Device, string(*res[0].ShareID), stringAttr(d, api.AttrIndex)
		if c.gpu == "" {
			t.Fatalf("claim %s's device %s has no GPU index", c.name, res[0].Device)
		}
		if alphaUUID == "" {
			alphaUUID = stringAttr(d, api.AttrUUID)
		}
	}
	alpha, beta := claims[0], claims[1]
	if alpha.gpu == beta.gpu {
		t.Fatalf("claims alpha and beta are both on GPU %s", alpha.gpu)
	}
	pidAlpha, pidBeta := containerPID(t, ns, "alpha"), containerPID(t, ns, "beta")

	check := func(what string, procs []gpuProcess) {
		t.Helper()
		writeProcesses(procs)
		eventually(t, time.Minute, "the plugin's metrics show "+what, func(ctx context.Context) error {
			return usageMetricsMatch(ctx, metricsAddr, ns, claims, procs)
		})
		for _, c := range claims {
			want := expectedUsage(c, procs)
			eventually(t, 2*time.Minute, "claim "+c.name+"'s status.devices shows "+what, func(ctx context.Context) error {
				return claimStatusUsageMatches(ctx, ns, node, c, want)
			})
			out, err := exec.CommandContext(ctx, gpudraCLI, "explain", "claim/"+c.name, "-n", ns, "--kubeconfig", lab.Layout{Root: state.Dir}.Kubeconfig()).CombinedOutput()
			if err != nil {
				t.Fatalf("gpudra explain claim/%s: %v\n%s", c.name, err, out)
			}
			noun := "processes"
			if want.processes == 1 {
				noun = "process"
			}
			gib := func(b int64) string { return strconv.FormatFloat(float64(b)/(1<<30), 'f', 1, 64) }
			line := fmt.Sprintf("uses %s of %s GiB memory, SM %d%% (guaranteed %d%%, cap %d%%), %d %s, as of ",
				gib(want.memoryUsed), gib(want.memoryLimit), want.sm, c.guarantee, c.cap, want.processes, noun)
			if !strings.Contains(string(out), line) {
				t.Errorf("gpudra explain claim/%s does not say %q:\n%s", c.name, line, out)
			}
		}
	}

	// Each pod's process on its claim's GPU, and this test's own process (in no pod) on
	// alpha's GPU.
	check("each claim's process and one unclaimed process", []gpuProcess{
		{gpu: alpha.gpu, pid: pidAlpha, memory: resource.MustParse("1536Mi"), sm: 35, claim: "alpha"},
		{gpu: beta.gpu, pid: pidBeta, memory: resource.MustParse("512Mi"), sm: 15, claim: "beta"},
		{gpu: alpha.gpu, pid: os.Getpid(), memory: resource.MustParse("256Mi"), sm: 5},
	})
	// Beta's process leaves beta's GPU and a process of beta's pod runs on alpha's GPU,
	// which beta holds nothing of; alpha's process grows; the process outside any pod ends.
	check("the processes after they changed", []gpuProcess{
		{gpu: alpha.gpu, pid: pidAlpha, memory: resource.MustParse("3Gi"), sm: 60, claim: "alpha"},
		{gpu: alpha.gpu, pid: pidBeta, memory: resource.MustParse("128Mi"), sm: 3},
	})
	if log, err := lab.PodLog(state, node, plugin.Namespace, plugin.Name, plugin.Spec.Containers[0].Name); err != nil {
		t.Error(err)
	} else if strings.Contains(log, "PodResources API is not used") || strings.Contains(log, "Listing the kubelet's pod resources failed") {
		t.Errorf("the plugin did not use the kubelet's PodResources API to confirm the claims' containers:\n%s", log)
	}
}

// containerPID is the host PID of the probe container's process in the pod. The kubelet
// (cgroupfs driver) puts each container in a cgroup .../pod<pod UID>/<container ID>, and
// /proc/<pid>/cgroup names it for every process of this host (the real node's containers run
// on it): the process whose cgroup names both the pod's UID and the container ID the runtime
// reports in the pod's status is the container's, and not its sandbox's or another pod's. The
// probe runs one process, so exactly one must match.
func containerPID(t *testing.T, ns, name string) int {
	t.Helper()
	p, err := client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var id string
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == "probe" {
			_, id, _ = strings.Cut(s.ContainerID, "://")
		}
	}
	if id == "" {
		t.Fatalf("pod %s/%s reports no container ID for its probe: %v", ns, name, p.Status.ContainerStatuses)
	}
	cgroup := regexp.MustCompile(`/pod` + regexp.QuoteMeta(string(p.UID)) + `/(?:[^/:]*-)?` + regexp.QuoteMeta(id) + `(?:\.scope)?$`)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil {
			continue // gone
		}
		for line := range strings.Lines(string(data)) {
			if cgroup.MatchString(strings.TrimSpace(line)) {
				pids = append(pids, pid)
				break
			}
		}
	}
	if len(pids) != 1 {
		t.Fatalf("pod %s/%s (UID %s): %d processes in the cgroup of its container %s, want one: %v", ns, name, p.UID, len(pids), id, pids)
	}
	t.Logf("pod %s/%s's container %s runs as host PID %d", ns, name, id[:min(12, len(id))], pids[0])
	return pids[0]
}

// claimUsage is what a claim's processes use on its GPU.
type claimUsage struct {
	memoryUsed, memoryLimit int64
	sm, processes           int
}

// expectedUsage is what the claim's processes use: the processes of the list that run for
// it on its GPU.
func expectedUsage(c *usageClaim, procs []gpuProcess) claimUsage {
	limit := resource.MustParse(c.memory)
	u := claimUsage{memoryLimit: limit.Value()}
	for _, p := range procs {
		if p.claim == c.name && p.gpu == c.gpu {
			u.memoryUsed += p.memory.Value()
			u.sm += p.sm
			u.processes++
		}
	}
	u.sm = min(u.sm, 100)
	return u
}

// usageMetricsMatch scrapes the plugin's metrics and compares the usage series with procs:
// per claim of the test's namespace, exactly one series per metric, on the claim's GPU, with
// its processes' numbers; no claim elsewhere with memory used; per GPU, all its processes'
// memory and the processes that run for no claim.
func usageMetricsMatch(ctx context.Context, addr, ns string, claims []*usageClaim, procs []gpuProcess) error {
	series, err := scrape(ctx, "http://"+addr+"/metrics")
	if err != nil {
		return err
	}
	var errs []string
	for _, c := range claims {
		want := expectedUsage(c, procs)
		for metric, v := range map[string]int64{
			"gpudra_plugin_claim_memory_used_bytes":         want.memoryUsed,
			"gpudra_plugin_claim_memory_limit_bytes":        want.memoryLimit,
			"gpudra_plugin_claim_sm_utilization_percent":    int64(want.sm),
			"gpudra_plugin_claim_processes":                 int64(want.processes),
			"gpudra_plugin_claim_compute_guarantee_percent": int64(c.guarantee),
			"gpudra_plugin_claim_compute_cap_percent":       int64(c.cap),
		} {
			var got []string
			for _, s := range series[metric] {
				if s.labels["namespace"] == ns && s.labels["claim"] == c.name {
					got = append(got, "gpu "+s.labels["gpu"]+": "+strconv.FormatFloat(s.value, 'f', -1, 64))
				}
			}
			if w := fmt.Sprintf("gpu %s: %d", c.gpu, v); !slices.Equal(got, []string{w}) {
				errs = append(errs, fmt.Sprintf("%s of claim %s: %v, want [%s]", metric, c.name, got, w))
			}
		}
	}
	for _, s := range series["gpudra_plugin_claim_memory_used_bytes"] {
		if s.labels["namespace"] != ns && s.value != 0 {
			errs = append(errs, fmt.Sprintf("claim %s/%s uses %g bytes on GPU %s, but runs none of the processes", s.labels["namespace"], s.labels["claim"], s.value, s.labels["gpu"]))
		}
	}
	for _, metric := range []string{"gpudra_plugin_gpu_unclaimed_processes", "gpudra_plugin_gpu_memory_used_bytes"} {
		if len(series[metric]) == 0 {
			errs = append(errs, "no series "+metric)
		}
		for _, s := range series[metric] {
			var want int64
			for _, p := range procs {
				if p.gpu != s.labels["gpu"] {
					continue
				}
				if metric == "gpudra_plugin_gpu_memory_used_bytes" {
					want += p.memory.Value()
				} else if p.claim == "" {
					want++
				}
			}
			if s.value != float64(want) {
				errs = append(errs, fmt.Sprintf("%s{gpu=%q} = %g, want %d", metric, s.labels["gpu"], s.value, want))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// claimStatusUsageMatches checks the usage the plugin wrote in the data of the claim's
// status.devices entry of its device.
func claimStatusUsageMatches(ctx context.Context, ns, node string, c *usageClaim, want claimUsage) error {
	cl, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, c.name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, s := range cl.Status.Devices {
		if s.Driver != api.DriverName || s.Pool != node || s.Device != c.device || s.ShareID == nil || *s.ShareID != c.shareID {
			continue
		}
		if s.Data == nil {
			return fmt.Errorf("the status of device %s has no data", c.device)
		}
		var data kubeletplugin.DeviceUsage
		if err := json.Unmarshal(s.Data.Raw, &data); err != nil {
			return fmt.Errorf("the status of device %s: %v: %s", c.device, err, s.Data.Raw)
		}
		u := data.Usage
		got := claimUsage{memoryUsed: -1, memoryLimit: u.MemoryLimitBytes, processes: u.Processes, sm: -1}
		if u.MemoryUsedBytes != nil {
			got.memoryUsed = *u.MemoryUsedBytes
		}
		if u.SMUtilizationPercent != nil {
			got.sm = *u.SMUtilizationPercent
		}
		if got != want || u.ComputeGuaranteePercent == nil || *u.ComputeGuaranteePercent != c.guarantee || u.ComputeCapPercent == nil || *u.ComputeCapPercent != c.cap {
			return fmt.Errorf("device %s's status says %s, want %+v, guarantee %d, cap %d", c.device, s.Data.Raw, want, c.guarantee, c.cap)
		}
		return nil
	}
	return fmt.Errorf("claim %s has no status entry of its device %s (share %s): %v", c.name, c.device, c.shareID, cl.Status.Devices)
}

// metricSeries is one sample of a Prometheus text exposition.
type metricSeries struct {
	labels map[string]string
	value  float64
}

var seriesLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)`)
var labelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// scrape reads the metrics at url, by metric name. A scrape under way finishes (within 10 s)
// when ctx ends, so that a poll's last complaint is about the metrics, not its deadline.
func scrape(ctx context.Context, url string) (map[string][]metricSeries, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	out := map[string][]metricSeries{}
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		m := seriesLine.FindStringSubmatch(lines.Text())
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		s := metricSeries{labels: map[string]string{}, value: v}
		for _, l := range labelPair.FindAllStringSubmatch(m[2], -1) {
			s.labels[l[1]] = l[2]
		}
		out[m[1]] = append(out[m[1]], s)
	}
	return out, lines.Err()
}

package kubeletplugin_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpudra/gpudra/driver/nvmlsim"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
	"github.com/gpudra/gpudra/kubeletplugin/usage"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// fakePodResources is the kubelet's PodResources API with a fixed answer.
type fakePodResources struct {
	podresourcesapi.PodResourcesListerClient
	pods []*podresourcesapi.PodResources
}

func (f *fakePodResources) List(context.Context, *podresourcesapi.ListPodResourcesRequest, ...grpc.CallOption) (*podresourcesapi.ListPodResourcesResponse, error) {
	return &podresourcesapi.ListPodResourcesResponse{PodResources: f.pods}, nil
}

// usageNode is a node whose plugin reads processes' pods from a fake /proc and the
// pods' claims from a fake API server and PodResources API.
type usageNode struct {
	*node
	client  *fake.Clientset
	proc    string
	kubelet *fakePodResources
}

func newUsageNode(t *testing.T) *usageNode {
	u := &usageNode{client: fake.NewClientset(), proc: t.TempDir(), kubelet: &fakePodResources{}}
	u.node = newNode(t, "dgx-h100", func(cfg *plugin.Config) {
		cfg.Client = u.client
		cfg.Usage = usage.Config{ProcRoot: u.proc, PodResources: u.kubelet}
	})
	return u
}

// runPod makes pod (with the given UID) hold the claim: reserved for it in the API
// server and given to its container by the kubelet.
func (u *usageNode) runPod(t *testing.T, c *resourceapi.ResourceClaim, pod string, uid types.UID) {
	t.Helper()
	c = c.DeepCopy()
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod, UID: uid}}
	if _, err := u.client.ResourceV1().ResourceClaims(c.Namespace).Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var res []*podresourcesapi.ClaimResource
	for _, r := range c.Status.Allocation.Devices.Results {
		res = append(res, &podresourcesapi.ClaimResource{DriverName: r.Driver, PoolName: r.Pool, DeviceName: r.Device})
	}
	u.kubelet.pods = append(u.kubelet.pods, &podresourcesapi.PodResources{Name: pod, Namespace: c.Namespace,
		Containers: []*podresourcesapi.ContainerResources{{Name: "main", DynamicResources: []*podresourcesapi.DynamicResource{
			{ClaimName: c.Name, ClaimNamespace: c.Namespace, ClaimResources: res}}}}})
}

// process puts pid in the fake /proc, in the container of the pod with the given UID
// ("" for a process outside any pod).
func (u *usageNode) process(t *testing.T, pid int, pod types.UID) {
	t.Helper()
	dir := filepath.Join(u.proc, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cgroup := "0::/system.slice/sshd.service\n"
	if pod != "" {
		slice := strings.ReplaceAll(string(pod), "-", "_")
		cgroup = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + slice + ".slice/cri-containerd-0123abcd.scope\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cgroup), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestUsageOfAShareAgainstItsLimits(t *testing.T) {
	u := newUsageNode(t)
	d := u.newDriver(nil)
	share := u.allocate(shareClaim("4Gi", "30", ""))
	mustPrepare(t, d, share)
	gpu := gpuOf(t, share)
	idx, _ := strconv.Atoi(gpu)
	const podUID = types.UID("1b4e28ba-2fa1-11d2-883f-0016d3cca427")
	u.runPod(t, share, "trainer", podUID)
	u.process(t, 4242, podUID)
	u.process(t, 4343, "")
	if err := nvmlsim.SetProcesses(u.backend.NVML, idx, []nvmlsim.Process{
		{PID: 4242, UsedMemoryBytes: 3 << 30, SMUtil: 25},
		{PID: 4343, UsedMemoryBytes: 1 << 30, SMUtil: 10},
	}); err != nil {
		t.Fatal(err)
	}

	got := scrape(t, serveMetrics(t, d))
	l := `{claim="` + share.Name + `",gpu="` + gpu + `",namespace="default"}`
	for _, want := range []string{
		`gpudra_plugin_claim_memory_used_bytes` + l + ` 3.221225472e+09`,
		`gpudra_plugin_claim_memory_limit_bytes` + l + ` 4.294967296e+09`,
		`gpudra_plugin_claim_sm_utilization_percent` + l + ` 25`,
		`gpudra_plugin_claim_processes` + l + ` 1`,
		`gpudra_plugin_claim_compute_guarantee_percent` + l + ` 30`,
		`gpudra_plugin_claim_compute_cap_percent` + l + ` 30`,
		`gpudra_plugin_gpu_memory_used_bytes{gpu="` + gpu + `"} 4.294967296e+09`,
		`gpudra_plugin_gpu_sm_utilization_percent{gpu="` + gpu + `"} 35`,
		`gpudra_plugin_gpu_unclaimed_processes{gpu="` + gpu + `"} 1`,
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("metrics lack %s:\n%s", want, grepUsage(got))
		}
	}
	for _, g := range d.Inventory().GPUs {
		if s := strconv.Itoa(g.Index); s != gpu && !strings.Contains(got, `gpudra_plugin_gpu_unclaimed_processes{gpu="`+s+`"} 0`+"\n") {
			t.Errorf("GPU %s: no zero unclaimed processes:\n%s", s, grepUsage(got))
		}
	}
	if strings.Contains(got, `gpudra_plugin_claim_memory_used_bytes{claim="`+share.Name+`",gpu="`+gpu+`",namespace="default"} 4.`) {
		t.Error("the process outside any pod counts for the share")
	}
}

func TestUsageNeedsTheKubeletToHaveGivenTheClaim(t *testing.T) {
	u := newUsageNode(t)
	d := u.newDriver(nil)
	share := u.allocate(shareClaim("2Gi", "20", ""))
	mustPrepare(t, d, share)
	gpu := gpuOf(t, share)
	idx, _ := strconv.Atoi(gpu)
	const podUID = types.UID("6fa459ea-ee8a-3ca4-894e-db77e160355e")
	u.runPod(t, share, "trainer", podUID)
	u.kubelet.pods[0].Containers[0].DynamicResources[0].ClaimName = "another-claim"
	u.process(t, 77, podUID)
	if err := nvmlsim.SetProcesses(u.backend.NVML, idx, []nvmlsim.Process{{PID: 77, UsedMemoryBytes: 1 << 30, SMUtil: 5}}); err != nil {
		t.Fatal(err)
	}
	got := scrape(t, serveMetrics(t, d))
	for _, want := range []string{
		`gpudra_plugin_claim_processes{claim="` + share.Name + `",gpu="` + gpu + `",namespace="default"} 0`,
		`gpudra_plugin_gpu_unclaimed_processes{gpu="` + gpu + `"} 1`,
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("metrics lack %s:\n%s", want, grepUsage(got))
		}
	}
}

func TestUsageIsWrittenToTheClaimsDeviceStatus(t *testing.T) {
	u := newUsageNode(t)
	d := u.newDriver(nil)
	share := u.allocate(shareClaim("4Gi", "30", ""))
	mustPrepare(t, d, share)
	idx, _ := strconv.Atoi(gpuOf(t, share))
	const podUID = types.UID("0e9d8c7b-6a5f-4e3d-2c1b-a09f8e7d6c5b")
	u.runPod(t, share, "trainer", podUID)
	u.process(t, 500, podUID)
	set := func(mem uint64, sm uint32) {
		t.Helper()
		if err := nvmlsim.SetProcesses(u.backend.NVML, idx, []nvmlsim.Process{{PID: 500, UsedMemoryBytes: mem, SMUtil: sm}}); err != nil {
			t.Fatal(err)
		}
		plugin.ExpireUsageSample(d)
	}
	ctx := context.Background()
	statusWrites := func() int {
		n := 0
		for _, a := range u.client.Actions() {
			if a.GetVerb() == "update" && a.GetResource().Resource == "resourceclaims" && a.GetSubresource() == "status" {
				n++
			}
		}
		return n
	}
	written := func() plugin.UsageData {
		t.Helper()
		c, err := u.client.ResourceV1().ResourceClaims(share.Namespace).Get(ctx, share.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Status.Devices) != 1 {
			t.Fatalf("status.devices = %+v, want the share's entry", c.Status.Devices)
		}
		s := c.Status.Devices[0]
		r := share.Status.Allocation.Devices.Results[0]
		if s.Driver != api.DriverName || s.Pool != r.Pool || s.Device != r.Device || s.ShareID == nil || r.ShareID == nil || *s.ShareID != string(*r.ShareID) {
			t.Errorf("status entry %s/%s/%s %v, want the allocated %s/%s/%s %v", s.Driver, s.Pool, s.Device, s.ShareID, r.Driver, r.Pool, r.Device, r.ShareID)
		}
		var du plugin.DeviceUsage
		if err := json.Unmarshal(s.Data.Raw, &du); err != nil {
			t.Fatal(err)
		}
		return du.Usage
	}

	set(1<<30, 20)
	plugin.WriteClaimStatus(ctx, d)
	got := written()
	if n := statusWrites(); n != 1 {
		t.Errorf("%d status writes, want 1", n)
	}
	if got.MemoryUsedBytes == nil || *got.MemoryUsedBytes != 1<<30 || got.MemoryLimitBytes != 4<<30 || got.Processes != 1 ||
		got.SMUtilizationPercent == nil || *got.SMUtilizationPercent != 20 ||
		got.ComputeGuaranteePercent == nil || *got.ComputeGuaranteePercent != 30 || got.ComputeCapPercent == nil || *got.ComputeCapPercent != 30 {
		t.Errorf("written usage = %+v", got)
	}

	set(1<<30+10<<20, 22) // 10 MiB and 2 points more: not worth a write
	plugin.WriteClaimStatus(ctx, d)
	if n := statusWrites(); n != 1 {
		t.Errorf("a small change was written (%d status writes)", n)
	}

	set(3<<30, 60)
	plugin.WriteClaimStatus(ctx, d)
	got = written()
	if n := statusWrites(); n != 2 || got.MemoryUsedBytes == nil || *got.MemoryUsedBytes != 3<<30 || *got.SMUtilizationPercent != 60 {
		t.Errorf("after a large change (%d status writes) the status has %+v", n, got)
	}
}

// NVML's "no value" for a process's memory (VALUE_NOT_AVAILABLE, all bits set) and an SM
// sample past 100 % are unknown usage: left out of the metrics and the claim's status,
// never read as 16 EiB of memory or a utilization above the GPU's.
func TestUsageNVMLCannotTellIsLeftOut(t *testing.T) {
	u := newUsageNode(t)
	d := u.newDriver(nil)
	share := u.allocate(shareClaim("4Gi", "30", ""))
	mustPrepare(t, d, share)
	gpu := gpuOf(t, share)
	idx, _ := strconv.Atoi(gpu)
	const podUID = types.UID("7c9e6679-7425-40de-944b-e07fc1f90ae7")
	u.runPod(t, share, "trainer", podUID)
	u.process(t, 600, podUID)
	if err := nvmlsim.SetProcesses(u.backend.NVML, idx, []nvmlsim.Process{
		{PID: 600, UsedMemoryBytes: ^uint64(0), SMUtil: ^uint32(0)},
	}); err != nil {
		t.Fatal(err)
	}
	got := scrape(t, serveMetrics(t, d))
	l := `{claim="` + share.Name + `",gpu="` + gpu + `",namespace="default"}`
	for _, absent := range []string{
		`gpudra_plugin_claim_memory_used_bytes` + l,
		`gpudra_plugin_claim_sm_utilization_percent` + l,
		`gpudra_plugin_gpu_memory_used_bytes{gpu="` + gpu + `"}`,
		`gpudra_plugin_gpu_sm_utilization_percent{gpu="` + gpu + `"}`,
	} {
		if strings.Contains(got, absent+" ") {
			t.Errorf("metrics have %s although NVML has no value for it:\n%s", absent, grepUsage(got))
		}
	}
	for _, want := range []string{
		`gpudra_plugin_claim_memory_limit_bytes` + l + ` 4.294967296e+09`,
		`gpudra_plugin_claim_processes` + l + ` 1`,
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("metrics lack %s:\n%s", want, grepUsage(got))
		}
	}

	plugin.WriteClaimStatus(context.Background(), d)
	c, err := u.client.ResourceV1().ResourceClaims(share.Namespace).Get(context.Background(), share.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Status.Devices) != 1 || c.Status.Devices[0].Data == nil {
		t.Fatalf("status.devices = %+v, want the share's usage", c.Status.Devices)
	}
	raw := string(c.Status.Devices[0].Data.Raw)
	for _, absent := range []string{"memoryUsedBytes", "smUtilizationPercent"} {
		if strings.Contains(raw, absent) {
			t.Errorf("status usage %s has %s although NVML has no value for it", raw, absent)
		}
	}
	if !strings.Contains(raw, `"processes":1`) || !strings.Contains(raw, `"memoryLimitBytes":4294967296`) {
		t.Errorf("status usage %s lacks the known process count and limit", raw)
	}
}

func grepUsage(text string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "gpudra_plugin_claim_") || strings.Contains(l, "_used_bytes") || strings.Contains(l, "utilization") || strings.Contains(l, "unclaimed") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

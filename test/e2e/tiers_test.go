//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/kubeletplugin"
	"github.com/gpudra/gpudra/lab"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// realNodePluginArgs are the arguments the real node's plugin runs with now: its pod's (with
// the chart) or its process's.
func realNodePluginArgs(t *testing.T, node string) []string {
	t.Helper()
	if _, _, ok := state.RealNodePluginDaemonSet(node); ok {
		p := realNodePluginPod(t, node)
		return append(append([]string{}, p.Spec.Containers[0].Command...), p.Spec.Containers[0].Args...)
	}
	c := state.Component(lab.PluginComponent(node))
	if c == nil {
		t.Fatalf("the lab has no plugin process for node %s", node)
	}
	return c.Argv
}

// flagValue is the value of --name=value in args, and whether it is there.
func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		for _, prefix := range []string{"--" + name + "=", "-" + name + "="} {
			if v, ok := strings.CutPrefix(a, prefix); ok {
				return v, true
			}
		}
	}
	return "", false
}

// TestRealNodeShareTiersReachTheContainers: two shares of one GPU on the real node, a
// Guaranteed one (a 30 % floor, bursting to 100 %) and a BestEffort one (no reservation,
// capped at 50 %, low priority), both run, and each container gets the environment its tier
// implies: gpudra's own description of the tier, and the variables of the mechanism that
// enforces shares on this node (HAMi-core where the plugin has a libvgpu.so, MPS otherwise).
func TestRealNodeShareTiersReachTheContainers(t *testing.T) {
	node := realNode(t)
	ctx := t.Context()
	vgpu, _ := flagValue(realNodePluginArgs(t, node), "vgpu-library")
	hami := vgpu != ""
	t.Logf("the real node's plugin enforces shares with %s", map[bool]string{true: "HAMi-core (" + vgpu + ")", false: "MPS limits (no --vgpu-library)"}[hami])
	ns := namespace(t, "share-tiers")
	tier := func(limits string) string {
		return `{"apiVersion": "gpu.gpudra.dev/v1alpha1", "kind": "GpuConfig", "limits": ` + limits + `}`
	}
	guaranteed := withConfig(claimOf(ns, "guaranteed", api.DeviceClassShare, map[string]string{"memory": "8Gi", "compute": "30"}, ""),
		tier(`{"policy": "Guaranteed", "computeLimit": 100}`))
	if _, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, guaranteed, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := func(name string) {
		t.Helper()
		p := lab.RealNodePod(ns, name, node, []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(name)}})
		if _, err := client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod("guaranteed")
	var first []resourcev1.DeviceRequestAllocationResult
	eventually(t, 2*time.Minute, "the Guaranteed share is allocated", func(ctx2 context.Context) error {
		var err error
		first, err = allocated(ctx2, ns, "guaranteed")
		if err == nil && len(first) != 1 {
			err = fmt.Errorf("%d devices", len(first))
		}
		return err
	})
	devices := publishedDevices(ctx, t)
	uuid := stringAttr(devices[first[0].Pool+"/"+first[0].Device], "uuid")
	// The BestEffort share goes to the same GPU.
	bestEffort := withConfig(claimOf(ns, "best-effort", api.DeviceClassShare, map[string]string{"memory": "2Gi"},
		fmt.Sprintf(`device.attributes["gpu.gpudra.dev"].uuid == %q`, uuid)),
		tier(`{"policy": "BestEffort", "computeLimit": 50}`))
	if _, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, bestEffort, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod("best-effort")

	reports := map[string]probeReport{}
	for _, c := range []struct {
		name    string
		compute string
	}{{"guaranteed", "30"}, {"best-effort", "0"}} {
		reports[c.name] = probeOutput(t, ns, c.name)
		res, err := allocated(ctx, ns, c.name)
		if err != nil || len(res) != 1 || res[0].Pool != node || res[0].ShareID == nil {
			t.Fatalf("claim %s: want one share of node %s, got %v (%v)", c.name, node, res, err)
		}
		d := devices[node+"/"+res[0].Device]
		if lab.DeviceType(d) != "share" || stringAttr(d, "uuid") != uuid {
			t.Errorf("claim %s got %s (type %s, GPU %s), want a share of GPU %s", c.name, res[0].Device, lab.DeviceType(d), stringAttr(d, "uuid"), uuid)
		}
		if got, ok := res[0].ConsumedCapacity[api.CapCompute]; !ok || got.Cmp(resource.MustParse(c.compute)) != 0 {
			t.Errorf("claim %s consumes compute %s (present %v), want %s", c.name, got.String(), ok, c.compute)
		}
		if r := reports[c.name]; r.env["GPUDRA_DEVICES"] != res[0].Device || r.env["GPUDRA_VISIBLE_DEVICES"] != uuid || len(r.gpuNodes()) != 1 {
			t.Errorf("claim %s got %s of GPU %s; the container reports:\n%s", c.name, res[0].Device, uuid, r.raw)
		}
	}

	// What every share's container is told of its tier, whatever enforces it.
	want := map[string]map[string]string{
		"guaranteed": {
			"GPUDRA_SHARE_POLICY_0": "Guaranteed", "GPUDRA_COMPUTE_PERCENT_0": "30", "GPUDRA_COMPUTE_LIMIT_0": "100",
			"GPUDRA_MEMORY_MIB_0": "8192",
		},
		"best-effort": {
			"GPUDRA_SHARE_POLICY_0": "BestEffort", "GPUDRA_COMPUTE_PERCENT_0": "0", "GPUDRA_COMPUTE_LIMIT_0": "50",
			"GPUDRA_SHARE_PRIORITY_0": "Low", "GPUDRA_MEMORY_MIB_0": "2048",
		},
	}
	// The Guaranteed share bursts: no compute cap. The BestEffort one is capped at 50 and
	// runs at low priority.
	var absent map[string][]string
	if hami {
		want["guaranteed"]["CUDA_DEVICE_MEMORY_LIMIT_0"] = "8192m"
		want["best-effort"]["CUDA_DEVICE_MEMORY_LIMIT_0"] = "2048m"
		want["best-effort"]["CUDA_DEVICE_SM_LIMIT"] = "50"
		want["best-effort"]["CUDA_TASK_PRIORITY"] = "1"
		want["guaranteed"]["LD_PRELOAD"] = cdi.VGPULibraryPath
		want["best-effort"]["LD_PRELOAD"] = cdi.VGPULibraryPath
		absent = map[string][]string{
			"guaranteed":  {"CUDA_DEVICE_SM_LIMIT", "CUDA_TASK_PRIORITY", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"},
			"best-effort": {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_CLIENT_PRIORITY"},
		}
	} else {
		want["guaranteed"]["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=8192M"
		want["best-effort"]["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=2048M"
		want["best-effort"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = "50"
		want["best-effort"]["CUDA_MPS_CLIENT_PRIORITY"] = "1"
		for _, w := range want {
			w["CUDA_MPS_PIPE_DIRECTORY"] = "/tmp/nvidia-mps"
		}
		absent = map[string][]string{
			"guaranteed":  {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_CLIENT_PRIORITY", "CUDA_DEVICE_SM_LIMIT", "CUDA_TASK_PRIORITY", "LD_PRELOAD"},
			"best-effort": {"CUDA_DEVICE_SM_LIMIT", "CUDA_TASK_PRIORITY", "LD_PRELOAD"},
		}
	}
	for name, w := range want {
		r := reports[name]
		for k, v := range w {
			if got, ok := r.env[k]; !ok || got != v {
				t.Errorf("%s share: %s=%q in the container (set %v), want %q", name, k, got, ok, v)
			}
		}
		for _, k := range absent[name] {
			if v, ok := r.env[k]; ok {
				t.Errorf("%s share: the container has %s=%s, which its tier does not set", name, k, v)
			}
		}
		if !hami && !r.files["/tmp/nvidia-mps/"+kubeletplugin.SimulatedMPSFile] {
			t.Errorf("%s share under MPS limits: its MPS control daemon is not in the container's pipe directory (files %v)", name, r.files)
		}
	}
}

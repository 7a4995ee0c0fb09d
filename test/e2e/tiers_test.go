//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/kubeletplugin/mps"
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

// shareMechanism is how the real node's plugin enforces shares: MPS limits (no
// --vgpu-library), or HAMi-core with the given libvgpu.so, on a node that may oversubscribe
// share memory (--memory-oversubscription).
type shareMechanism struct {
	name           string
	vgpuLibrary    string
	oversubscribed string // the factor; "" is none
}

// editPlugin makes the plugin's pod template what the chart renders for the mechanism
// (kubeletPlugin.vgpuLibrary: the flag and the library's mount; .memoryOversubscription).
func (m shareMechanism) editPlugin(s *corev1.PodSpec) {
	c := &s.Containers[0]
	removeArg(c, "vgpu-library")
	removeArg(c, "memory-oversubscription")
	s.Volumes = slices.DeleteFunc(s.Volumes, func(v corev1.Volume) bool { return v.Name == "vgpu-library" })
	c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(v corev1.VolumeMount) bool { return v.Name == "vgpu-library" })
	if m.vgpuLibrary != "" {
		setArg(c, "vgpu-library", m.vgpuLibrary)
		setHostPathMount(s, "vgpu-library", m.vgpuLibrary, corev1.HostPathFile, m.vgpuLibrary, true)
	}
	if m.oversubscribed != "" {
		setArg(c, "memory-oversubscription", m.oversubscribed)
	}
}

func (m shareMechanism) flags() string {
	var out []string
	if m.vgpuLibrary != "" {
		out = append(out, "--vgpu-library="+m.vgpuLibrary)
	}
	if m.oversubscribed != "" {
		out = append(out, "--memory-oversubscription="+m.oversubscribed)
	}
	if len(out) == 0 {
		return "no --vgpu-library"
	}
	return strings.Join(out, " ")
}

// TestRealNodeShareTiersReachTheContainers: two shares of one GPU on the real node, a
// Guaranteed one (a 30 % floor, bursting to 100 %, high priority) and a BestEffort one (no
// reservation, capped at 50 %, low priority), both run, and each container gets the
// environment its tier implies: gpudra's own description of the tier, and the variables of
// the mechanism that enforces shares on the node. The node's plugin runs in turn without a
// libvgpu.so (MPS limits: each claim's MPS control daemon in the container's pipe directory),
// with one (HAMi-core: its limits, priorities and shared cache, the library mounted and
// preloaded, nothing of MPS), and with one on a node that oversubscribes share memory 1.5×
// (HAMi-core's virtual device memory switched on). The lab's real node has no HAMi-core, so
// the library is a stand-in file at a host path, as the lab's driver libraries are: the test
// checks what the containers are given, not HAMi-core's enforcement. The plugin gets its
// original pod template back at the end.
func TestRealNodeShareTiersReachTheContainers(t *testing.T) {
	inLane(t, realNodeLane)
	node := realNode(t)
	dsNS, _, ok := state.RealNodePluginDaemonSet(node)
	if !ok {
		labLacks(t, "the real node's plugin as the chart's DaemonSet (install: chart), whose flags the test changes")
	}
	// What the chart grants with vgpuLibrary set: get on the pods of HAMi-core claims.
	grantPluginPodReads(t, dsNS)
	lib := filepath.Join(lab.Layout{Root: state.Dir}.NodeDir(node), "hami-core", "libvgpu.so")
	if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(lib)) }) // after the plugin no longer mounts it
	restoreRealNodePluginAtEnd(t, node)
	for _, m := range []shareMechanism{
		{name: "MPS"},
		{name: "HAMi-core", vgpuLibrary: lib},
		{name: "HAMi-core oversubscribed", vgpuLibrary: lib, oversubscribed: "1.5"},
	} {
		t.Run(strings.ReplaceAll(m.name, " ", "_"), func(t *testing.T) {
			if err := updateRealNodePlugin(t, t.Context(), node, m.flags(), m.editPlugin); err != nil {
				t.Fatal(err)
			}
			if got := flagOf(realNodePluginArgs(t, node), "vgpu-library"); got != m.vgpuLibrary {
				t.Fatalf("the real node's plugin runs with --vgpu-library=%q, want %q", got, m.vgpuLibrary)
			}
			shareTiersReachTheContainers(t, node, m)
		})
	}
}

func flagOf(args []string, name string) string {
	v, _ := flagValue(args, name)
	return v
}

// shareTiersReachTheContainers runs the two shares under the plugin as it runs now, m.
func shareTiersReachTheContainers(t *testing.T, node string, m shareMechanism) {
	ctx := t.Context()
	hami := m.vgpuLibrary != ""
	wantPercent := "100"
	if m.oversubscribed != "" {
		wantPercent = "150" // 1.5 × the card's memory
	}
	eventually(t, 2*time.Minute, "the node's share devices say memoryOversubscriptionPercent="+wantPercent, func(ctx context.Context) error {
		shares := 0
		for key, d := range publishedDevices(ctx, t) {
			if !strings.HasPrefix(key, node+"/") || lab.DeviceType(d) != "share" {
				continue
			}
			shares++
			if got := stringAttr(d, api.AttrMemoryOversubscriptionPercent); got != wantPercent {
				return fmt.Errorf("%s has %s=%q", key, api.AttrMemoryOversubscriptionPercent, got)
			}
		}
		if shares == 0 {
			return fmt.Errorf("node %s publishes no share device", node)
		}
		return nil
	})
	ns := namespace(t, "share-tiers-"+strings.ToLower(strings.ReplaceAll(m.name, " ", "-")))
	tier := func(limits string) string {
		return `{"apiVersion": "gpu.gpudra.dev/v1alpha1", "kind": "GpuConfig", "limits": ` + limits + `}`
	}
	guaranteed := withConfig(claimOf(ns, "guaranteed", api.DeviceClassShare, map[string]string{"memory": "8Gi", "compute": "30"}, ""),
		tier(`{"policy": "Guaranteed", "computeLimit": 100, "priority": "High"}`))
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
			"GPUDRA_SHARE_PRIORITY_0": "High", "GPUDRA_MEMORY_MIB_0": "8192",
		},
		"best-effort": {
			"GPUDRA_SHARE_POLICY_0": "BestEffort", "GPUDRA_COMPUTE_PERCENT_0": "0", "GPUDRA_COMPUTE_LIMIT_0": "50",
			"GPUDRA_SHARE_PRIORITY_0": "Low", "GPUDRA_MEMORY_MIB_0": "2048",
		},
	}
	// The Guaranteed share bursts: no compute cap, at high priority. The BestEffort one is
	// capped at 50 and runs at low priority.
	var absent map[string][]string
	mpsVars := []string{"CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_CLIENT_PRIORITY"}
	hamiVars := []string{"CUDA_DEVICE_MEMORY_LIMIT_0", "CUDA_DEVICE_SM_LIMIT_0", "CUDA_TASK_PRIORITY", "CUDA_DEVICE_MEMORY_SHARED_CACHE", "CUDA_OVERSUBSCRIBE", "CUDA_DEVICE_ORDER"}
	if hami {
		// HAMi-core's variables: per-device memory limits and SM caps in percent
		// (CUDA_DEVICE_MEMORY_LIMIT_<k> with a unit, CUDA_DEVICE_SM_LIMIT_<k>, k the CUDA
		// index in PCI bus order), the task priority (0 high, 1 low). libvgpu.so comes
		// from /etc/ld.so.preload, not LD_PRELOAD, so no environment variable loads it.
		want["guaranteed"]["CUDA_DEVICE_MEMORY_LIMIT_0"] = "8192m"
		want["best-effort"]["CUDA_DEVICE_MEMORY_LIMIT_0"] = "2048m"
		want["guaranteed"]["CUDA_TASK_PRIORITY"] = "0"
		want["best-effort"]["CUDA_DEVICE_SM_LIMIT_0"] = "50"
		want["best-effort"]["CUDA_TASK_PRIORITY"] = "1"
		for _, w := range want {
			w["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
			if m.oversubscribed != "" {
				w["CUDA_OVERSUBSCRIBE"] = "true"
			}
		}
		absent = map[string][]string{
			"guaranteed":  append(slices.Clone(mpsVars), "CUDA_DEVICE_SM_LIMIT_0", "CUDA_DEVICE_SM_LIMIT", "LD_PRELOAD"),
			"best-effort": append(slices.Clone(mpsVars), "CUDA_DEVICE_SM_LIMIT", "LD_PRELOAD"),
		}
		if m.oversubscribed == "" {
			for name := range absent {
				absent[name] = append(absent[name], "CUDA_OVERSUBSCRIBE")
			}
		}
	} else {
		want["guaranteed"]["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=8192M"
		want["best-effort"]["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=2048M"
		want["guaranteed"]["CUDA_MPS_CLIENT_PRIORITY"] = "0"
		want["best-effort"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = "50"
		want["best-effort"]["CUDA_MPS_CLIENT_PRIORITY"] = "1"
		for _, w := range want {
			w["CUDA_MPS_PIPE_DIRECTORY"] = "/tmp/nvidia-mps"
		}
		absent = map[string][]string{
			"guaranteed":  append(slices.Clone(hamiVars), "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
			"best-effort": hamiVars,
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
				t.Errorf("%s share: the container has %s=%s, which its tier does not set under %s", name, k, v, m.name)
			}
		}
		hasPipe := slices.Contains(r.mounts, cdi.MPSPipeDir)
		if hami {
			// libvgpu.so mounted where the mounted /etc/ld.so.preload names it, and
			// HAMi-core's shared cache (CUDA_DEVICE_MEMORY_SHARED_CACHE) in the claim's
			// own folder.
			if !slices.Contains(r.mounts, cdi.VGPULibraryPath) {
				t.Errorf("%s share under HAMi-core: %s is not mounted in the container (mounts %v)", name, cdi.VGPULibraryPath, r.mounts)
			}
			if !slices.Contains(r.mounts, cdi.VGPUPreloadPath) || r.preload != cdi.VGPULibraryPath {
				t.Errorf("%s share under HAMi-core: %s lists %q (mounted: %v), want %s", name, cdi.VGPUPreloadPath, r.preload, slices.Contains(r.mounts, cdi.VGPUPreloadPath), cdi.VGPULibraryPath)
			}
			if cache := r.env["CUDA_DEVICE_MEMORY_SHARED_CACHE"]; !strings.HasPrefix(cache, cdi.VGPUCacheDir+"/") || !strings.HasSuffix(cache, ".cache") || !slices.Contains(r.mounts, cdi.VGPUCacheDir) {
				t.Errorf("%s share under HAMi-core: CUDA_DEVICE_MEMORY_SHARED_CACHE=%q, want a file in %s, mounted (mounts %v)", name, cache, cdi.VGPUCacheDir, r.mounts)
			}
			if hasPipe {
				t.Errorf("%s share under HAMi-core: the container has an MPS pipe directory %s (mounts %v)", name, cdi.MPSPipeDir, r.mounts)
			}
		} else {
			if !r.files[cdi.MPSPipeDir+"/"+mps.SimulatedFile] {
				t.Errorf("%s share under MPS limits: its MPS control daemon is not in the container's pipe directory (files %v)", name, r.files)
			}
			if slices.Contains(r.mounts, cdi.VGPULibraryPath) || r.preload != "" {
				t.Errorf("%s share under MPS limits: the container has %s mounted or preloads %q", name, cdi.VGPULibraryPath, r.preload)
			}
		}
	}
}

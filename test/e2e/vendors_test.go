//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// vendorNode is the simulated (kwok) lab node whose simulated AMD profile is kfd ("" when
// the lab has none).
func vendorNode(t *testing.T, kfd string) string {
	t.Helper()
	for _, n := range state.Nodes {
		if n.KFD == kfd && !n.Real {
			return n.Name
		}
	}
	labLacks(t, "a node with kfd: %s", kfd)
	return ""
}

// claimPod is a pod on node with one claim from a new template of the given request
// (and constraints, "" for none), as YAML documents.
func claimPod(ns, name, node, request, constraints string) string {
	return fmt.Sprintf(`
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: %[2]s, namespace: %[1]s}
spec:
  spec:
    devices:
      requests:
      - %[4]s
%[5]s
---
apiVersion: v1
kind: Pod
metadata: {name: %[2]s, namespace: %[1]s}
spec:
  nodeSelector: {kubernetes.io/hostname: %[3]s}
  tolerations: [{operator: Exists}]
  resourceClaims: [{name: gpu, resourceClaimTemplateName: %[2]s}]
  containers:
  - name: c
    image: registry.k8s.io/pause:3.10
    resources: {claims: [{name: gpu}]}
`, ns, name, node, request, constraints)
}

// podDevices are the published devices allocated to the pod's claim.
func podDevices(t *testing.T, ns, pod string) []string {
	t.Helper()
	p, err := client.CoreV1().Pods(ns).Get(t.Context(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod %s/%s: claim statuses %+v", ns, pod, p.Status.ResourceClaimStatuses)
	}
	res, err := allocated(t.Context(), ns, *p.Status.ResourceClaimStatuses[0].ResourceClaimName)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range res {
		out = append(out, r.Pool+"/"+r.Device)
	}
	return out
}

// TestAnyGPUOf64GiLandsOnEitherVendor: one claim, "any GPU with at least 64Gi" on the
// any-gpu class, is allocated an AMD GPU on the mixed node (its L40S has 45 GiB) and an
// NVIDIA H100 on an H100 node.
func TestAnyGPUOf64GiLandsOnEitherVendor(t *testing.T) {
	inLane(t, clusterLane)
	mixed := vendorNode(t, "mixed-l40s-mi210")
	ns := namespace(t, "e2e-any-gpu")
	const request = `{name: gpu, exactly: {deviceClassName: any-gpu.gpudra.dev, selectors: [{cel: {expression: 'device.capacity["gpu.gpudra.dev"].memory.compareTo(quantity("64Gi")) >= 0'}}]}}`
	h100 := ""
	for _, n := range state.Nodes {
		if n.Profile == "dgx-h100" && n.KFD == "" {
			h100 = n.Name
			break
		}
	}
	if h100 == "" {
		labLacks(t, "a dgx-h100 node")
	}
	apply(t, claimPod(ns, "on-mixed", mixed, request, "")+claimPod(ns, "on-h100", h100, request, ""))
	devices := publishedDevices(t.Context(), t)
	for pod, vendor := range map[string]string{"on-mixed": api.VendorAMD, "on-h100": api.VendorNVIDIA} {
		eventually(t, 2*time.Minute, pod+" runs", podRunning(ns, pod))
		got := podDevices(t, ns, pod)
		if len(got) != 1 || stringAttr(devices[got[0]], api.AttrVendor) != vendor {
			t.Errorf("%s: allocated %v, want one %s GPU", pod, got, vendor)
		}
	}
}

// TestXGMIGroupOfFourLandsOnOneHive: four AMD GPUs with a matchAttribute on xgmiHive land
// in one hive, twice on an 8-GPU MI300X node; a third such claim waits.
func TestXGMIGroupOfFourLandsOnOneHive(t *testing.T) {
	inLane(t, clusterLane)
	node := vendorNode(t, "mi300x-8")
	ns := namespace(t, "e2e-xgmi")
	const request = `{name: gpus, exactly: {deviceClassName: amd-gpu.gpudra.dev, count: 4}}`
	const constraints = `      constraints: [{matchAttribute: gpu.gpudra.dev/xgmiHive}]`
	apply(t, claimPod(ns, "quad-a", node, request, constraints)+claimPod(ns, "quad-b", node, request, constraints))
	devices := publishedDevices(t.Context(), t)
	seen := map[string]bool{}
	for _, pod := range []string{"quad-a", "quad-b"} {
		eventually(t, 2*time.Minute, pod+" runs", podRunning(ns, pod))
		got := podDevices(t, ns, pod)
		hives := map[string]bool{}
		for _, d := range got {
			hives[stringAttr(devices[d], api.AttrXGMIHive)] = true
			if seen[d] {
				t.Errorf("%s was allocated twice", d)
			}
			seen[d] = true
		}
		if len(got) != 4 || len(hives) != 1 || hives[""] {
			t.Errorf("%s: allocated %v in hives %v, want 4 GPUs of one hive", pod, got, hives)
		}
	}
	apply(t, claimPod(ns, "quad-c", node, request, constraints))
	time.Sleep(10 * time.Second)
	if err := podRunning(ns, "quad-c")(t.Context()); err == nil {
		t.Error("a third quad runs on a node of 8 GPUs")
	}
}

// TestQueueQuotaAcrossVendors: a queue with 2 GPUs of quota in gpudra.dev/gpu-percent admits
// one AMD GPU (any-gpu with a vendor selector) and one NVIDIA GPU (gpu.gpudra.dev), each
// charged 100, and a third GPU of either vendor waits on the quota.
func TestQueueQuotaAcrossVendors(t *testing.T) {
	inLane(t, clusterLane)
	if !state.Kueue {
		labLacks(t, "Kueue (lab file kueue.enabled: false)")
	}
	vendorNode(t, "mi300x-8")
	const queue = "e2e-vendors"
	applyForTest(t, decode(t, clusterQueue(queue, true, 64, 2))...)
	ns := namespace(t, "e2e-vendors")
	apply(t, teamQueue(ns, queue)+
		quotaTemplate(ns, "amd", `{name: gpu, exactly: {deviceClassName: any-gpu.gpudra.dev, selectors: [{cel: {expression: 'device.attributes["gpu.gpudra.dev"].vendor == "amd"'}}]}}`)+
		quotaTemplate(ns, "nvidia", `{name: gpu, exactly: {deviceClassName: gpu.gpudra.dev}}`))
	apply(t, quotaJob(ns, "amd-job", "team", "amd", 1)+quotaJob(ns, "nvidia-job", "team", "nvidia", 1))
	for _, job := range []string{"amd-job", "nvidia-job"} {
		eventually(t, 3*time.Minute, job+" runs", jobRuns(ns, job, 1))
		if got := charged(t, ns, job); got != 100 {
			t.Errorf("%s charged %d %s, want 100", job, got, api.QuotaGPUPercent)
		}
	}
	apply(t, quotaJob(ns, "third", "team", "amd", 1))
	eventually(t, time.Minute, "a third GPU waits for quota", waitsOnQuota(ns, "third"))
	eventually(t, time.Minute, "the queue holds 2 GPUs of two vendors", func(ctx context.Context) error {
		return clusterQueueUses(queue, api.QuotaGPUPercent, 200)(ctx)
	})
}

// TestGroupOfFourOnEitherVendor: one request, a device of gpu-group-4.gpudra.dev, is an XGMI
// group of 4 GPUs of one hive on the MI300X node, twice and never the same GPU, after
// which no whole AMD GPU is left there; and an NVLink group of 4 on an NVIDIA node that
// publishes one.
func TestGroupOfFourOnEitherVendor(t *testing.T) {
	inLane(t, clusterLane)
	amd := vendorNode(t, "mi300x-8")
	ns := namespace(t, "e2e-gpu-group")
	const request = `{name: group, exactly: {deviceClassName: gpu-group-4.gpudra.dev}}`
	devices := publishedDevices(t.Context(), t)
	real := map[string]bool{}
	for _, n := range state.RealNodes() {
		real[n.Name] = true
	}
	nvidia := "" // the first simulated node by name that publishes an NVLink group of 4
	for key, d := range devices {
		pool, _, _ := strings.Cut(key, "/")
		if !real[pool] && stringAttr(d, api.AttrType) == api.TypeNVLinkGroup && stringAttr(d, api.AttrGPUCount) == "4" && (nvidia == "" || pool < nvidia) {
			nvidia = pool
		}
	}
	if nvidia == "" {
		labLacks(t, "an NVIDIA node that publishes NVLink groups of 4")
	}
	apply(t, claimPod(ns, "xgmi-a", amd, request, "")+claimPod(ns, "xgmi-b", amd, request, "")+claimPod(ns, "nvlink", nvidia, request, ""))
	members := map[string]bool{}
	for _, pod := range []string{"xgmi-a", "xgmi-b"} {
		eventually(t, 2*time.Minute, pod+" runs", podRunning(ns, pod))
		got := podDevices(t, ns, pod)
		if len(got) != 1 {
			t.Fatalf("%s: allocated %v, want one group device", pod, got)
		}
		d := devices[got[0]]
		if stringAttr(d, api.AttrType) != api.TypeXGMIGroup || stringAttr(d, api.AttrGPUCount) != "4" || stringAttr(d, api.AttrXGMIHive) == "" {
			t.Errorf("%s: allocated %s of type %q, %s GPUs, hive %q; want an XGMI group of 4 in a hive", pod, got[0],
				stringAttr(d, api.AttrType), stringAttr(d, api.AttrGPUCount), stringAttr(d, api.AttrXGMIHive))
		}
		for _, m := range strings.Split(stringAttr(d, api.AttrMembers), "-") {
			if members[m] {
				t.Errorf("%s: GPU %s is in both groups", pod, m)
			}
			members[m] = true
		}
	}
	eventually(t, 2*time.Minute, "nvlink runs", podRunning(ns, "nvlink"))
	if got := podDevices(t, ns, "nvlink"); len(got) != 1 || stringAttr(devices[got[0]], api.AttrType) != api.TypeNVLinkGroup || stringAttr(devices[got[0]], api.AttrGPUCount) != "4" {
		t.Errorf("nvlink: allocated %v, want one NVLink group of 4", got)
	}
	apply(t, claimPod(ns, "whole", amd, `{name: gpu, exactly: {deviceClassName: amd-gpu.gpudra.dev}}`, ""))
	time.Sleep(10 * time.Second)
	if err := podRunning(ns, "whole")(t.Context()); err == nil {
		t.Error("a whole AMD GPU runs beside two groups of 4 on a node of 8 GPUs")
	}
}

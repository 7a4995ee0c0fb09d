//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/lab"
	"github.com/gpudra/gpudra/queueing/admission"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// quotaTemplate is a ResourceClaimTemplate of one request (a new YAML document).
func quotaTemplate(ns, name, request string) string {
	return `
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: ` + name + `, namespace: ` + ns + `}
spec:
  spec:
    devices:
      requests:
      - ` + request + `
`
}

// quotaJob is a Job of pods pods on the queue, each with one claim from the template.
func quotaJob(ns, name, queue, template string, pods int) string {
	return fmt.Sprintf(`
---
apiVersion: batch/v1
kind: Job
metadata:
  name: %[2]s
  namespace: %[1]s
  labels: {kueue.x-k8s.io/queue-name: %[3]s}
spec:
  parallelism: %[5]d
  completions: %[5]d
  template:
    spec:
      restartPolicy: Never
      resourceClaims: [{name: gpu, resourceClaimTemplateName: %[4]s}]
      containers:
      - name: worker
        image: registry.k8s.io/pause:3.10
        resources:
          requests: {cpu: 100m}
          claims: [{name: gpu}]
`, ns, name, queue, template, pods)
}

// charged is what Kueue charged the Job's admitted Workload in gpudra.dev/gpu-percent.
func charged(t *testing.T, ns, job string) int64 {
	t.Helper()
	wl := jobWorkload(t, ns, job)
	if wl.Status.Admission == nil {
		t.Fatalf("workload %s is not admitted: %+v", wl.Name, wl.Status.Conditions)
	}
	var total int64
	for _, a := range wl.Status.Admission.PodSetAssignments {
		q := a.ResourceUsage[api.QuotaGPUPercent]
		total += q.Value()
	}
	return total
}

// waitsOnQuota: the Job's Workload has no quota, and Kueue says it lacks
// gpudra.dev/gpu-percent: in its QuotaReserved=False condition or, where Kueue v0.19.2 lost
// that condition to a concurrent status write of its own, in the Pending event it recorded
// on the Workload.
func waitsOnQuota(ns, job string) func(context.Context) error {
	return func(ctx context.Context) error {
		wls, err := dyn().Resource(workloadsGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, u := range wls.Items {
			owned := false
			for _, o := range u.GetOwnerReferences() {
				owned = owned || (o.Kind == "Job" && o.Name == job)
			}
			if !owned {
				continue
			}
			var wl kueue.Workload
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &wl); err != nil {
				return err
			}
			if wl.Status.Admission != nil {
				return fmt.Errorf("workload %s holds quota: %+v", wl.Name, wl.Status.Admission)
			}
			if c := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadQuotaReserved); c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, api.QuotaGPUPercent) {
				return nil
			}
			if c := admission.KueueEventReason(ctx, client, &wl); c != nil && strings.Contains(c.Message, "insufficient unused quota for "+api.QuotaGPUPercent) {
				return nil
			}
			return fmt.Errorf("workload %s: no word from Kueue on %s yet (conditions %+v)", wl.Name, api.QuotaGPUPercent, wl.Status.Conditions)
		}
		return fmt.Errorf("no Kueue workload for job %s yet", job)
	}
}

// TestQuotaBoundsEveryMixInGPUs: a team with 4 GPUs of quota (400 gpudra.dev/gpu-percent)
// runs 4 whole GPUs, and its next claim, a share, waits with Kueue's message naming the
// quota; eight shares of 50 % compute fit in the same 4 GPUs and the ninth waits; a share
// asking for more of its card's memory than of its compute is refused by the gpudra check; a
// whole GPU asking for compute 1 (which the allocator would give whole) is refused, naming
// the field; a template with a matchAttribute constraint is admitted and charged its GPUs; MIG
// devices are charged by the part of a GPU they take, not one unit each; and a template
// with firstAvailable is refused with a message naming the field, which `gpudra explain
// workload` shows.
func TestQuotaBoundsEveryMixInGPUs(t *testing.T) {
	inLane(t, clusterLane)
	if !state.Kueue {
		labLacks(t, "Kueue (lab file kueue.enabled: false)")
	}
	const queue = "e2e-quota"
	applyForTest(t, decode(t, clusterQueue(queue, true, 64, 4))...)
	ns := namespace(t, "e2e-quota")
	share := func(compute string) string {
		return `{name: gpu, exactly: {deviceClassName: gpu-share.gpudra.dev, capacity: {requests: {memory: 4Gi, compute: "` + compute + `"}}}}`
	}
	apply(t, teamQueue(ns, queue)+quotaTemplate(ns, "whole", `{name: gpu, exactly: {deviceClassName: gpu.gpudra.dev}}`)+
		quotaTemplate(ns, "half", share("50"))+
		quotaTemplate(ns, "same-model-pair", `{name: gpus, exactly: {deviceClassName: gpu.gpudra.dev, count: 2}}
      constraints: [{requests: [gpus], matchAttribute: gpu.gpudra.dev/productName}]`)+
		quotaTemplate(ns, "heavy", `{name: gpu, exactly: {deviceClassName: gpu-share.gpudra.dev, capacity: {requests: {memory: 40Gi, compute: "10"}}}}`)+
		quotaTemplate(ns, "mig-3g", `{name: gpu, exactly: {deviceClassName: mig.gpudra.dev, selectors: [{cel: {expression: 'device.attributes["gpu.gpudra.dev"].migProfile == "3g.40gb" && device.attributes["gpu.gpudra.dev"].productName.startsWith("NVIDIA H100")'}}]}}`)+
		quotaTemplate(ns, "mig-1g", `{name: gpu, exactly: {deviceClassName: mig.gpudra.dev, selectors: [{cel: {expression: 'device.attributes["gpu.gpudra.dev"].migProfile == "1g.10gb" && device.attributes["gpu.gpudra.dev"].productName.startsWith("NVIDIA H100")'}}]}}`)+
		quotaTemplate(ns, "first-available", `{name: gpu, firstAvailable: [{name: h100, deviceClassName: gpu.gpudra.dev, selectors: [{cel: {expression: 'device.attributes["gpu.gpudra.dev"].productName.startsWith("NVIDIA H100")'}}]}, {name: any, deviceClassName: gpu.gpudra.dev}]}`))

	t.Run("whole GPUs fill the quota and a share waits", func(t *testing.T) {
		apply(t, quotaJob(ns, "four-gpus", "team", "whole", 4))
		eventually(t, 3*time.Minute, "four-gpus: all 4 pods run", jobRuns(ns, "four-gpus", 4))
		if got := charged(t, ns, "four-gpus"); got != 400 {
			t.Errorf("four whole GPUs charged %d %s, want 400", got, api.QuotaGPUPercent)
		}
		apply(t, quotaJob(ns, "one-share", "team", "half", 1))
		eventually(t, time.Minute, "one-share waits for GPU quota, and Kueue says so", waitsOnQuota(ns, "one-share"))
		deleteJobNow(t, ns, "four-gpus")
		eventually(t, 3*time.Minute, "one-share runs once the GPUs are free", jobRuns(ns, "one-share", 1))
		if got := charged(t, ns, "one-share"); got != 50 {
			t.Errorf("a 50 %% share charged %d, want 50", got)
		}
		deleteJobNow(t, ns, "one-share")
	})

	t.Run("eight 50 percent shares fit in 4 GPUs and the ninth waits", func(t *testing.T) {
		eventually(t, time.Minute, "the queue is empty", clusterQueueUses(queue, api.QuotaGPUPercent, 0))
		apply(t, quotaJob(ns, "eight-shares", "team", "half", 8))
		eventually(t, 3*time.Minute, "eight-shares: all 8 pods run", jobRuns(ns, "eight-shares", 8))
		if got := charged(t, ns, "eight-shares"); got != 400 {
			t.Errorf("eight 50 %% shares charged %d, want 400", got)
		}
		apply(t, quotaJob(ns, "ninth-share", "team", "half", 1))
		eventually(t, time.Minute, "ninth-share waits for GPU quota, and Kueue says so", waitsOnQuota(ns, "ninth-share"))
		deleteJobNow(t, ns, "eight-shares")
		eventually(t, 3*time.Minute, "ninth-share runs once the shares are gone", jobRuns(ns, "ninth-share", 1))
		deleteJobNow(t, ns, "ninth-share")
	})

	t.Run("a template with a matchAttribute constraint is admitted and charged", func(t *testing.T) {
		eventually(t, time.Minute, "the queue is empty", clusterQueueUses(queue, api.QuotaGPUPercent, 0))
		apply(t, quotaJob(ns, "pair", "team", "same-model-pair", 2))
		eventually(t, 3*time.Minute, "pair: both pods run", jobRuns(ns, "pair", 2))
		if got := charged(t, ns, "pair"); got != 400 {
			t.Errorf("two pods of two GPUs charged %d, want 400", got)
		}
		deleteJobNow(t, ns, "pair")
	})

	t.Run("a share whose memory outweighs its compute is refused", func(t *testing.T) {
		apply(t, quotaJob(ns, "heavy", "team", "heavy", 1))
		eventually(t, time.Minute, "the gpudra check refuses the heavy share, saying what would pass",
			workloadSays(ns, "heavy", "but compute 10: a queue charges a share only its compute"))
		eventually(t, time.Minute, "the refused workload holds no quota", clusterQueueUses(queue, api.QuotaGPUPercent, 0))
		deleteJobNow(t, ns, "heavy")
	})

	t.Run("a whole GPU asking for compute 1 is refused, naming the field", func(t *testing.T) {
		// The allocator would give the whole GPU, and Kueue charge the 1 asked for.
		objs := decode(t, quotaTemplate(ns, "cheap-whole", `{name: gpu, exactly: {deviceClassName: gpu.gpudra.dev, capacity: {requests: {compute: "1"}}}}`))
		var tmpl resourcev1.ResourceClaimTemplate
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs[0].Object, &tmpl); err != nil {
			t.Fatal(err)
		}
		_, err := client.ResourceV1().ResourceClaimTemplates(ns).Create(t.Context(), &tmpl, metav1.CreateOptions{})
		if err == nil {
			t.Fatal("the template of a whole GPU asking for compute 1 was accepted")
		}
		for _, want := range []string{"spec.spec.devices.requests[0].exactly.capacity.requests", "allocated whole", "drop capacity.requests"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("refused with %q, want it to say %q", err, want)
			}
		}
	})

	t.Run("MIG devices are charged by size", func(t *testing.T) {
		eventually(t, time.Minute, "the queue is empty", clusterQueueUses(queue, api.QuotaGPUPercent, 0))
		// What the cluster's H100 MIG devices of each profile take of their GPU.
		size := map[string]int64{}
		for _, d := range publishedDevices(t.Context(), t) {
			if lab.DeviceType(d) != api.TypeMIG || !strings.HasPrefix(stringAttr(d, api.AttrProductName), "NVIDIA H100") {
				continue
			}
			c := d.Capacity[api.CapCompute].Value
			p := stringAttr(d, api.AttrMIGProfile)
			size[p] = max(size[p], c.Value())
		}
		big, small := size["3g.40gb"], size["1g.10gb"]
		if big == 0 || small == 0 || small >= big || big >= 100 {
			t.Fatalf("H100 MIG devices publish compute 3g.40gb=%d, 1g.10gb=%d: want 0 < 1g.10gb < 3g.40gb < 100", big, small)
		}
		apply(t, quotaJob(ns, "mig-big", "team", "mig-3g", 2)+quotaJob(ns, "mig-small", "team", "mig-1g", 3))
		eventually(t, 3*time.Minute, "mig-big runs", jobRuns(ns, "mig-big", 2))
		eventually(t, 3*time.Minute, "mig-small runs", jobRuns(ns, "mig-small", 3))
		if got := charged(t, ns, "mig-big"); got != 2*big {
			t.Errorf("two 3g.40gb charged %d, want %d", got, 2*big)
		}
		if got := charged(t, ns, "mig-small"); got != 3*small {
			t.Errorf("three 1g.10gb charged %d, want %d", got, 3*small)
		}
		eventually(t, time.Minute, "the queue holds both MIG jobs by size", clusterQueueUses(queue, api.QuotaGPUPercent, 2*big+3*small))
		deleteJobNow(t, ns, "mig-big")
		deleteJobNow(t, ns, "mig-small")
	})

	t.Run("firstAvailable is refused, naming the field", func(t *testing.T) {
		apply(t, quotaJob(ns, "first-available", "team", "first-available", 1))
		eventually(t, time.Minute, "Kueue refuses the firstAvailable template", workloadSays(ns, "first-available", "FirstAvailable device selection is not supported"))
		wl := jobWorkload(t, ns, "first-available")
		out, err := exec.CommandContext(t.Context(), gpudraCLI, "explain", "workload/"+wl.Name, "-n", ns, "--kubeconfig", lab.Layout{Root: state.Dir}.Kubeconfig()).CombinedOutput()
		if err != nil {
			t.Fatalf("gpudra explain workload/%s: %v\n%s", wl.Name, err, out)
		}
		if !strings.Contains(string(out), "FirstAvailable device selection is not supported") || !strings.Contains(string(out), "devices.requests[0]") {
			t.Errorf("gpudra explain does not say why Kueue refused the workload, naming the field:\n%s", out)
		}
		if j, err := dyn().Resource(jobsGVR).Namespace(ns).Get(t.Context(), "first-available", metav1.GetOptions{}); err != nil || !suspended(j) {
			t.Errorf("the firstAvailable Job is not held suspended (err %v)", err)
		}
	})
}

// TestQueuedShareSelectedByCELRunsWithItsLimits: a queued Job whose claim template selects
// the real node's GPU model by CEL and asks for a Guaranteed share (gpudra's opaque config)
// is charged the share's compute, admitted by the gpudra check, which plans it on the real
// node (its placement on the Workload and the pod), and prepared there: its container gets
// the tier and limits the claim asks for.
func TestQueuedShareSelectedByCELRunsWithItsLimits(t *testing.T) {
	inLane(t, realNodeLane)
	if !state.Kueue {
		labLacks(t, "Kueue (lab file kueue.enabled: false)")
	}
	node := realNode(t)
	product := ""
	for key, d := range publishedDevices(t.Context(), t) {
		if strings.HasPrefix(key, node+"/") && lab.DeviceType(d) == api.TypeShare {
			product = stringAttr(d, api.AttrProductName)
		}
	}
	if product == "" {
		t.Fatalf("the real node %s publishes no share device", node)
	}
	const queue = "e2e-quota-cel"
	applyForTest(t, decode(t, clusterQueue(queue, true, 64, 1))...)
	ns := namespace(t, "e2e-quota-cel")
	apply(t, teamQueue(ns, queue)+`---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: guaranteed, namespace: `+ns+`}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu-share.gpudra.dev
          selectors: [{cel: {expression: 'device.attributes["gpu.gpudra.dev"].productName == "`+product+`"'}}]
          capacity: {requests: {memory: 8Gi, compute: "30"}}
      config:
      - requests: [gpu]
        opaque:
          driver: gpu.gpudra.dev
          parameters: {apiVersion: gpu.gpudra.dev/v1alpha1, kind: GpuConfig, limits: {policy: Guaranteed, computeLimit: 100, priority: High}}
`)
	name := queuedRealNodeJob(t, ns, "cel-share", "guaranteed", node, false)
	if got := charged(t, ns, "cel-share"); got != 30 {
		t.Errorf("a 30 %% share charged %d %s, want 30", got, api.QuotaGPUPercent)
	}
	checkPlacedBy(t, ns, "cel-share", name, node)
	report := probeOutput(t, ns, name)
	for k, want := range map[string]string{
		"GPUDRA_SHARE_POLICY_0": "Guaranteed", "GPUDRA_COMPUTE_PERCENT_0": "30", "GPUDRA_COMPUTE_LIMIT_0": "100",
		"GPUDRA_SHARE_PRIORITY_0": "High", "GPUDRA_MEMORY_MIB_0": "8192",
	} {
		if got := report.env[k]; got != want {
			t.Errorf("the container has %s=%q, want %q:\n%s", k, got, want, report.raw)
		}
	}
}

// checkPlacedBy: the gpudra check admitted the Job's Workload and planned its pod on node:
// the check is Ready with the node in its placement, and the pod carries that placement and
// the Workload's UID, as Kueue copies them from the check's pod set update. A pod the
// scheduler placed without the check carries neither.
func checkPlacedBy(t *testing.T, ns, job, pod, node string) {
	t.Helper()
	wl := jobWorkload(t, ns, job)
	var placement []string
	for _, c := range wl.Status.AdmissionChecks {
		if c.Name != topologyCheck {
			continue
		}
		if c.State != kueue.CheckStateReady {
			t.Errorf("workload %s: check %s is %s (%s), want Ready", wl.Name, c.Name, c.State, c.Message)
		}
		for _, u := range c.PodSetUpdates {
			placement = append(placement, u.Annotations[api.AnnotationPlacement])
		}
	}
	if len(placement) != 1 || placement[0] != node {
		t.Errorf("workload %s: the check's placement %q, want [%s]", wl.Name, placement, node)
	}
	p, err := client.CoreV1().Pods(ns).Get(t.Context(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Annotations[api.AnnotationPlacement]; got != node {
		t.Errorf("pod %s: annotation %s=%q, want %q", pod, api.AnnotationPlacement, got, node)
	}
	if got := p.Labels[api.LabelWorkload]; got != string(wl.UID) {
		t.Errorf("pod %s: label %s=%q, want the Workload's UID %s", pod, api.LabelWorkload, got, wl.UID)
	}
}

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/lab"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// queuedRealNodeJob submits Job job of one probe pod to LocalQueue "team", its claim from
// ResourceClaimTemplate template, and waits for the pod to be bound to the real node: pinned
// there by its node selector, or, with pinned false, by the gpudra check alone. It returns
// the pod's name.
func queuedRealNodeJob(t *testing.T, ns, job, template, node string, pinned bool) string {
	t.Helper()
	pod := lab.RealNodePod(ns, "", node, []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)}})
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	if !pinned {
		pod.Spec.NodeSelector = nil // the gpudra check places it
	}
	j := &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: job, Namespace: ns, Labels: map[string]string{"kueue.x-k8s.io/queue-name": "team"}},
		Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](1), Completions: ptr.To[int32](1), BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{Spec: pod.Spec}},
	}
	manifest, err := yaml.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	apply(t, string(manifest))
	var name string
	eventually(t, 3*time.Minute, job+"'s pod is bound to the real node", func(ctx context.Context) error {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName == node {
				name = p.Name
				return nil
			}
			return fmt.Errorf("pod %s is on %q: %s", p.Name, p.Spec.NodeName, schedulingMessage(&p))
		}
		return fmt.Errorf("no pod yet")
	})
	return name
}

// TestQueuedSharingConfigsAreChargedTheirCompute: under a queue of one GPU, with the gpudra
// check, a share with an MPS config, a whole GPU with a time-slicing config and (with the
// real node's plugin switched to HAMi-core) a HAMi-core share are each admitted, charged
// their compute in gpudra.dev/gpu-percent, planned by the check on the real node, and
// prepared there with what their config asks: the MPS thread cap, the time-slice, the
// HAMi-core limits. As in TestRealNodeShareTiersReachTheContainers, HAMi-core's library is a
// stand-in file: the test checks what the container is given.
func TestQueuedSharingConfigsAreChargedTheirCompute(t *testing.T) {
	inLane(t, realNodeLane)
	if !state.Kueue {
		labLacks(t, "Kueue (lab file kueue.enabled: false)")
	}
	node := realNode(t)
	const queue = "e2e-quota-sharing"
	applyForTest(t, decode(t, clusterQueue(queue, true, 64, 1))...)
	ns := namespace(t, "e2e-quota-sharing")
	gpuConfig := func(body string) string {
		return `
      config:
      - requests: [gpu]
        opaque:
          driver: gpu.gpudra.dev
          parameters: {apiVersion: gpu.gpudra.dev/v1alpha1, kind: GpuConfig, ` + body + `}`
	}
	share := `{name: gpu, exactly: {deviceClassName: gpu-share.gpudra.dev, capacity: {requests: {memory: 8Gi, compute: "20"}}}}`
	apply(t, teamQueue(ns, queue)+quotaTemplate(ns, "mps-share", share+gpuConfig(`sharing: {strategy: MPS, mps: {defaultActiveThreadPercentage: 10}}`))+
		quotaTemplate(ns, "time-sliced", `{name: gpu, exactly: {deviceClassName: gpu.gpudra.dev}}`+gpuConfig(`sharing: {strategy: TimeSlicing, timeSlicing: {interval: Long}}`))+
		quotaTemplate(ns, "plain-share", share))

	// The claims the real node's plugin holds before these jobs: each job's claim must be
	// unprepared before the next runs, or the next one's device (a whole GPU where the last
	// one had a share of it) is refused as still in use until the kubelet unprepares it.
	before := checkpointClaims(t, node)

	// run runs the template's Job alone on the queue and checks its charge, its placement and
	// the container's environment.
	run := func(t *testing.T, job, template string, charge int64, env map[string]string) {
		t.Helper()
		eventually(t, 2*time.Minute, "the previous job's claim is unprepared on the real node", func(context.Context) error {
			for uid, st := range checkpointClaims(t, node) {
				if _, ok := before[uid]; !ok {
					return fmt.Errorf("claim %s is still in the plugin's checkpoint (%s)", uid, st)
				}
			}
			return nil
		})
		eventually(t, time.Minute, "the queue is empty", clusterQueueUses(queue, api.QuotaGPUPercent, 0))
		pod := queuedRealNodeJob(t, ns, job, template, node, true)
		if got := charged(t, ns, job); got != charge {
			t.Errorf("%s charged %d %s, want %d", job, got, api.QuotaGPUPercent, charge)
		}
		checkPlacedBy(t, ns, job, pod, node)
		report := probeOutput(t, ns, pod)
		for k, want := range env {
			if got := report.env[k]; got != want {
				t.Errorf("%s's container has %s=%q, want %q:\n%s", job, k, got, want, report.raw)
			}
		}
		deleteJobNow(t, ns, job)
	}

	t.Run("a share with an MPS config", func(t *testing.T) {
		// The config's thread cap (10) is below the share's compute (20): it wins.
		run(t, "mps-share", "mps-share", 20, map[string]string{
			"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "10", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=8192M", "CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps",
			"GPUDRA_COMPUTE_PERCENT_0": "20", "GPUDRA_MEMORY_MIB_0": "8192",
		})
	})
	t.Run("a whole GPU with a time-slicing config", func(t *testing.T) {
		run(t, "time-sliced", "time-sliced", 100, map[string]string{"GPUDRA_TIMESLICE": "Long"})
	})
	t.Run("a share under HAMi-core", func(t *testing.T) {
		dsNS, _, ok := state.RealNodePluginDaemonSet(node)
		if !ok {
			labLacks(t, "the real node's plugin as the chart's DaemonSet (install: chart), whose flags the test changes")
		}
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
		m := shareMechanism{name: "HAMi-core", vgpuLibrary: lib}
		if err := updateRealNodePlugin(t, t.Context(), node, m.flags(), m.editPlugin); err != nil {
			t.Fatal(err)
		}
		if got := flagOf(realNodePluginArgs(t, node), "vgpu-library"); got != lib {
			t.Fatalf("the real node's plugin runs with --vgpu-library=%q, want %q", got, lib)
		}
		run(t, "hami-share", "plain-share", 20, map[string]string{
			"CUDA_DEVICE_MEMORY_LIMIT_0": "8192m", "CUDA_DEVICE_SM_LIMIT_0": "20", "GPUDRA_COMPUTE_PERCENT_0": "20",
		})
	})
}

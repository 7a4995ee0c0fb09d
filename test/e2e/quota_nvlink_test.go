//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/lab"
)

var clusterQueuesGVR = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"}

// TestNVLinkGroupsChargedInGPUs: a pod asks for a 4-GPU NVLink group as the extended
// resource gpudra.dev/nvlink-group-4 (DeviceClass nvlink-group-4.gpudra.dev), and Kueue
// charges it as 400 gpudra.dev/gpu-percent (4 GPUs) through the transformation in
// deployments/kueue/config/kueue-config.yaml. A ClusterQueue with 8 GPUs behind the gpudra
// check admits a Job of two such pods — its Workload and the queue's usage say 800
// gpudra.dev/gpu-percent, each pod gets one 4-GPU group from kube-scheduler — and holds a third
// group pending for lack of GPU quota until the first Job is gone.
func TestNVLinkGroupsChargedInGPUs(t *testing.T) {
	inLane(t, clusterLane)
	requireTrainingBlock(t)
	const queue = "e2e-nvlink-quota"
	applyForTest(t, decode(t, clusterQueue(queue, true, 64, 8))...)
	ns := namespace(t, "e2e-nvlink-quota")
	apply(t, `
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: training, namespace: `+ns+`}
spec: {clusterQueue: `+queue+`}
`)

	apply(t, nvlinkGroupJob("two-groups", ns, "training", 2))
	eventually(t, 3*time.Minute, "two-groups: both pods run", jobRuns(ns, "two-groups", 2))
	wl := jobWorkload(t, ns, "two-groups")
	if wl.Status.Admission == nil || len(wl.Status.Admission.PodSetAssignments) != 1 {
		t.Fatalf("workload %s is not admitted: %+v", wl.Name, wl.Status)
	}
	usage := wl.Status.Admission.PodSetAssignments[0].ResourceUsage
	if got := usage[api.QuotaGPUPercent]; got.Value() != 800 {
		t.Errorf("workload %s charged %s %s, want 800 (2 pods x one 4-GPU group): %v", wl.Name, api.QuotaGPUPercent, got.String(), usage)
	}
	if got, ok := usage["gpudra.dev/nvlink-group-4"]; ok {
		t.Errorf("workload %s also charged the group itself (gpudra.dev/nvlink-group-4 %s): Kueue's KueueDRAIntegrationExtendedResource gate is on?", wl.Name, got.String())
	}
	eventually(t, time.Minute, "the ClusterQueue's usage is 8 GPUs", clusterQueueUses(queue, api.QuotaGPUPercent, 800))
	checkPodsHoldOneGroup(t, ns, "two-groups", 4)

	apply(t, nvlinkGroupJob("one-more", ns, "training", 1))
	eventually(t, time.Minute, "one-more: its workload waits for GPU quota", waitsOnQuota(ns, "one-more"))
	// Kueue records what it tried to admit (after transformations) with the Pending condition.
	pending := jobWorkload(t, ns, "one-more")
	if rr := pending.Status.ResourceRequests; len(rr) != 1 {
		t.Errorf("pending workload %s: status.resourceRequests %v, want one pod set", pending.Name, rr)
	} else if got := rr[0].Resources[api.QuotaGPUPercent]; got.Value() != 400 {
		t.Errorf("pending workload %s requests %s %s, want 400: %v", pending.Name, api.QuotaGPUPercent, got.String(), rr[0].Resources)
	}
	if j, err := dyn().Resource(jobsGVR).Namespace(ns).Get(t.Context(), "one-more", metav1.GetOptions{}); err != nil || !suspended(j) {
		t.Fatalf("one-more is not held suspended while the 8 GPUs are used (err %v)", err)
	}
	deleteJobNow(t, ns, "two-groups")
	eventually(t, 3*time.Minute, "one-more is admitted and runs once two-groups is gone", jobRuns(ns, "one-more", 1))
	eventually(t, time.Minute, "the ClusterQueue's usage is 4 GPUs", clusterQueueUses(queue, api.QuotaGPUPercent, 400))
}

// nvlinkGroupJob is an Indexed Job of pods that each ask for one 4-GPU NVLink group as an
// extended resource (no claim template) on the training block, pinned by the gpudra check.
func nvlinkGroupJob(name, ns, queue string, pods int) string {
	return blockGangJob(name, ns, queue, pods, "", "", "limits: {gpudra.dev/nvlink-group-4: 1}")
}

// jobWorkload returns the Kueue Workload of a Job.
func jobWorkload(t *testing.T, ns, job string) *kueue.Workload {
	t.Helper()
	wls, err := dyn().Resource(workloadsGVR).Namespace(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range wls.Items {
		for _, o := range u.GetOwnerReferences() {
			if o.Kind == "Job" && o.Name == job {
				var wl kueue.Workload
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &wl); err != nil {
					t.Fatal(err)
				}
				return &wl
			}
		}
	}
	t.Fatalf("no Kueue workload for job %s", job)
	return nil
}

// clusterQueueUses: the ClusterQueue's status.flavorsUsage adds up to want of the resource.
func clusterQueueUses(name string, res corev1.ResourceName, want int64) func(context.Context) error {
	return func(ctx context.Context) error {
		u, err := dyn().Resource(clusterQueuesGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var cq kueue.ClusterQueue
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &cq); err != nil {
			return err
		}
		total := resource.Quantity{}
		var all []string
		for _, f := range cq.Status.FlavorsUsage {
			for _, r := range f.Resources {
				all = append(all, fmt.Sprintf("%s/%s=%s", f.Name, r.Name, r.Total.String()))
				if r.Name == res {
					total.Add(r.Total)
				}
			}
		}
		if total.Value() != want {
			return fmt.Errorf("ClusterQueue %s uses %s %s, want %d (flavorsUsage: %s)", name, res, total.String(), want, strings.Join(all, ", "))
		}
		return nil
	}
}

// checkPodsHoldOneGroup: every pod of the job has the claim kube-scheduler made for its
// extended resource, allocated one NVLink group device of gpus GPUs.
func checkPodsHoldOneGroup(t *testing.T, ns, job string, gpus int) {
	t.Helper()
	pods, err := client.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil {
		t.Fatal(err)
	}
	devices := publishedDevices(t.Context(), t)
	for _, p := range pods.Items {
		st := p.Status.ExtendedResourceClaimStatus
		if st == nil {
			t.Errorf("pod %s has no extended resource claim", p.Name)
			continue
		}
		results, err := allocated(t.Context(), ns, st.ResourceClaimName)
		if err != nil {
			t.Errorf("pod %s: %v", p.Name, err)
			continue
		}
		if len(results) != 1 {
			t.Errorf("pod %s: claim %s holds %d devices, want one NVLink group", p.Name, st.ResourceClaimName, len(results))
			continue
		}
		d := devices[results[0].Pool+"/"+results[0].Device]
		if lab.DeviceType(d) != "nvlink-group" || stringAttr(d, "gpuCount") != fmt.Sprint(gpus) {
			t.Errorf("pod %s got %s/%s (type %s, gpuCount %s), want a %d-GPU NVLink group", p.Name, results[0].Pool, results[0].Device, lab.DeviceType(d), stringAttr(d, "gpuCount"), gpus)
			continue
		}
		t.Logf("pod %s on %s holds %s (%s GPUs)", p.Name, p.Spec.NodeName, results[0].Device, stringAttr(d, "gpuCount"))
	}
}

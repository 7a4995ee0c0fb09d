//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/lab"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// absentImage is an image no real node has: the lab imports only its own, and pods use them
// with imagePullPolicy Never, so a container of it waits with ErrImageNeverPull.
const absentImage = "gpudra.dev/lab/absent:v1"

// TestAdmittedGangThatCannotStartIsEvictedWhole: a gang of two 1-GPU workers, admitted
// through the gpudra check and bound to the real node, where their claims are allocated and
// prepared, cannot start: its image is not there. After Kueue's waitForPodsReady timeout
// (the lab file's kueue.podsReadyTimeout) Kueue evicts its Workload (Evicted, reason
// PodsReadyTimeout) and suspends the Job; both pods go, their claims are deleted and
// unprepared, the ClusterQueue's GPU usage is back to 0, and the Workload waits out its
// back-off (requeueState) before it is admitted again.
func TestAdmittedGangThatCannotStartIsEvictedWhole(t *testing.T) {
	inLane(t, realNodeLane)
	if !state.Kueue {
		labLacks(t, "Kueue (lab file kueue.enabled: false)")
	}
	timeout, err := time.ParseDuration(state.KueuePodsReadyTimeout)
	if err != nil || timeout > 2*time.Minute {
		labLacks(t, "a Kueue waitForPodsReady timeout of at most 2m (lab file kueue.podsReadyTimeout; the lab's Kueue has %q, empty for the shipped 5m)", state.KueuePodsReadyTimeout)
	}
	node := realNode(t)
	const queue, job = "e2e-pods-ready", "cannot-start"
	applyForTest(t, decode(t, clusterQueue(queue, true, 8, 2))...)
	ns := namespace(t, "e2e-pods-ready")
	apply(t, teamQueue(ns, queue)+oneGPUTemplate(ns))
	pod := lab.RealNodePod(ns, "", node, []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")}})
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	pod.Spec.Containers[0].Image = absentImage
	manifest, err := yaml.Marshal(&batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: job, Namespace: ns, Labels: map[string]string{"kueue.x-k8s.io/queue-name": "team"}},
		Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](2), Completions: ptr.To[int32](2),
			Template: corev1.PodTemplateSpec{Spec: pod.Spec}},
	})
	if err != nil {
		t.Fatal(err)
	}
	apply(t, string(manifest))

	// Admitted, bound and prepared: each pod's claim holds a GPU of the node, and the
	// kubelet waits for the image.
	claims := map[string]string{} // UID → name
	var admittedAt time.Time
	eventually(t, 3*time.Minute, "the gang is admitted, both pods hold a prepared GPU of "+node+" and wait for their image", func(ctx context.Context) error {
		wl, err := workloadOfJob(ctx, ns, job)
		if err != nil {
			return err
		}
		c := apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadAdmitted)
		if c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("workload %s is not admitted: %+v", wl.Name, wl.Status.Conditions)
		}
		admittedAt = c.LastTransitionTime.Time
		pods, err := jobPods(ctx, ns, job)
		if err != nil {
			return err
		}
		if len(pods) != 2 {
			return fmt.Errorf("%d pods of job %s, want 2", len(pods), job)
		}
		clear(claims)
		prepared := checkpointClaims(t, node)
		for _, p := range pods {
			if p.Spec.NodeName != node {
				return fmt.Errorf("pod %s is on %q, want %s%s", p.Name, p.Spec.NodeName, node, schedulingMessage(&p))
			}
			if w := waitingReason(&p); w != "ErrImageNeverPull" {
				return fmt.Errorf("pod %s: container waits with %q, want ErrImageNeverPull", p.Name, w)
			}
			for _, s := range p.Status.ResourceClaimStatuses {
				if s.ResourceClaimName == nil {
					return fmt.Errorf("pod %s: claim %s not created yet", p.Name, s.Name)
				}
				c, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, *s.ResourceClaimName, metav1.GetOptions{})
				if err != nil {
					return err
				}
				res, err := allocated(ctx, ns, c.Name)
				if err != nil || len(res) != 1 || res[0].Pool != node {
					return fmt.Errorf("claim %s: want one GPU of %s, got %v (%v)", c.Name, node, res, err)
				}
				if _, ok := prepared[string(c.UID)]; !ok {
					return fmt.Errorf("claim %s is not in the plugin's checkpoint on %s yet", c.Name, node)
				}
				claims[string(c.UID)] = c.Name
			}
		}
		if len(claims) != 2 {
			return fmt.Errorf("the pods hold claims %v, want one each", claims)
		}
		return clusterQueueUses(queue, api.QuotaGPUPercent, 200)(ctx)
	})

	var evictedAt time.Time
	eventually(t, timeout+time.Minute, "Kueue evicts the gang after its PodsReady timeout", func(ctx context.Context) error {
		wl, err := workloadOfJob(ctx, ns, job)
		if err != nil {
			return err
		}
		c := apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadEvicted)
		if c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("workload %s is not evicted: %+v", wl.Name, wl.Status.Conditions)
		}
		if c.Reason != kueue.WorkloadEvictedByPodsReadyTimeout {
			t.Fatalf("workload %s evicted with reason %s (%s), want %s", wl.Name, c.Reason, c.Message, kueue.WorkloadEvictedByPodsReadyTimeout)
		}
		evictedAt = c.LastTransitionTime.Time
		return nil
	})
	// Condition times have whole seconds.
	if waited := evictedAt.Sub(admittedAt); waited < timeout-time.Second {
		t.Errorf("evicted %s after admission, before the PodsReady timeout %s", waited, timeout)
	}

	// Freed while it waits out its back-off (30 s the first time): no quota, no pod, no
	// claim, nothing prepared on the node.
	eventually(t, time.Minute, "the whole gang is gone, its quota and GPUs free, the Job suspended and requeued with back-off", func(ctx context.Context) error {
		wl, err := workloadOfJob(ctx, ns, job)
		if err != nil {
			return err
		}
		if wl.Status.Admission != nil || apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted) {
			return fmt.Errorf("workload %s holds quota (admitted again before its GPUs were seen free?): %+v", wl.Name, wl.Status.Conditions)
		}
		rq := wl.Status.RequeueState
		if rq == nil || ptr.Deref(rq.Count, 0) < 1 || rq.RequeueAt == nil || !rq.RequeueAt.After(evictedAt) {
			return fmt.Errorf("workload %s has no requeue back-off after its eviction: requeueState %+v", wl.Name, rq)
		}
		if err := clusterQueueUses(queue, api.QuotaGPUPercent, 0)(ctx); err != nil {
			return err
		}
		j, err := client.BatchV1().Jobs(ns).Get(ctx, job, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !ptr.Deref(j.Spec.Suspend, false) {
			return fmt.Errorf("job %s is not suspended", job)
		}
		pods, err := jobPods(ctx, ns, job)
		if err != nil {
			return err
		}
		if len(pods) > 0 {
			return fmt.Errorf("%d pods of job %s left, e.g. %s (%s)", len(pods), job, pods[0].Name, pods[0].Status.Phase)
		}
		cs, err := client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, c := range cs.Items {
			if c.Status.Allocation != nil {
				return fmt.Errorf("claim %s still holds %v", c.Name, c.Status.Allocation.Devices.Results)
			}
			if _, ok := claims[string(c.UID)]; ok {
				return fmt.Errorf("claim %s of the evicted pods is not deleted", c.Name)
			}
		}
		for uid := range checkpointClaims(t, node) {
			if name, ok := claims[uid]; ok {
				return fmt.Errorf("claim %s is still prepared on %s", name, node)
			}
		}
		t.Logf("requeued %d time(s), again at %s (%s after the eviction)", *rq.Count, rq.RequeueAt.Format(time.RFC3339), rq.RequeueAt.Sub(evictedAt))
		return nil
	})
}

// jobPods are the pods of a Job, those being deleted included.
func jobPods(ctx context.Context, ns, job string) ([]corev1.Pod, error) {
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil {
		return nil, err
	}
	return pods.Items, nil
}

// waitingReason is why the pod's first container waits ("" when it does not).
func waitingReason(p *corev1.Pod) string {
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Waiting != nil {
			return s.State.Waiting.Reason
		}
	}
	return ""
}

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpudra/gpudra/lab"
)

// Kubernetes 1.37 gang scheduling: with the GenericWorkload and WorkloadWithJob feature gates
// (the lab turns both on), the Job controller creates a scheduling.k8s.io/v1beta1 Workload and
// PodGroup for a Job whose spec.scheduling asks for a gang, puts its pods in that group
// (spec.schedulingGroup), and kube-scheduler binds the group's pods all together or not at all.

// gangJob is a Job of pods that each take one fourGPUTemplate claim on the training block's
// 4-GPU nodes, scheduled as one gang. queue "" leaves it to kube-scheduler alone.
func gangJob(name, ns, queue, template string, pods int) string {
	labels, meta, gate := "", "", ""
	if queue != "" {
		labels = "\n  labels: {kueue.x-k8s.io/queue-name: " + queue + "}"
		meta = "\n    metadata:\n      annotations: {gpudra.dev/required-topology: block}"
		gate = "\n      schedulingGates: [{name: gpudra.dev/placement}]"
	}
	return fmt.Sprintf(`
apiVersion: batch/v1
kind: Job
metadata:
  name: %s
  namespace: %s%s
spec:
  parallelism: %d
  completions: %d
  completionMode: Indexed
  scheduling:
    schedulingPolicy:
      gang: {}
  template:%s
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 0%s
      nodeSelector: {%s: hgx-a100-4gpu}
      resourceClaims: [{name: tp, resourceClaimTemplateName: %s}]
      containers:
      - name: worker
        image: registry.k8s.io/pause:3.10
        resources:
          requests: {cpu: "1"}
          claims: [{name: tp}]
`, name, ns, labels, pods, pods, meta, gate, lab.LabelProfile, template)
}

// jobPodGroup returns the PodGroup the Job controller made for the job's pods, checking that
// every pod of the job belongs to it and that it is a gang of minCount pods.
func jobPodGroup(ctx context.Context, ns, job string, pods, minCount int) error {
	list, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil {
		return err
	}
	if len(list.Items) != pods {
		return fmt.Errorf("job %s has %d pods, want %d", job, len(list.Items), pods)
	}
	group := ""
	for _, p := range list.Items {
		g := p.Spec.SchedulingGroup
		if g == nil || g.PodGroupName == nil {
			return fmt.Errorf("pod %s has no spec.schedulingGroup", p.Name)
		}
		if group != "" && *g.PodGroupName != group {
			return fmt.Errorf("pods of job %s are in groups %s and %s", job, group, *g.PodGroupName)
		}
		group = *g.PodGroupName
	}
	pg, err := client.SchedulingV1beta1().PodGroups(ns).Get(ctx, group, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("PodGroup %s: %w", group, err)
	}
	if gang := pg.Spec.SchedulingPolicy.Gang; gang == nil || int(gang.MinCount) != minCount {
		return fmt.Errorf("PodGroup %s has scheduling policy %+v, want a gang of %d", group, pg.Spec.SchedulingPolicy, minCount)
	}
	return nil
}

// TestGangJobBindsAllOrNothing: kube-scheduler with the 1.37 gang plugin binds a GPU gang that
// does not fit in full not at all (no GPUs held by half a gang), and one that fits entirely.
func TestGangJobBindsAllOrNothing(t *testing.T) {
	inLane(t, clusterLane)
	requireTrainingBlock(t)
	nodes := nodesWithProfile("hgx-a100-4gpu")
	ns := namespace(t, "e2e-podgroup")
	apply(t, fourGPUTemplate("tp4", ns)+"---\n"+gangJob("too-big", ns, "", "tp4", nodes+1))
	eventually(t, time.Minute, "the Job controller puts the pods of too-big into a gang PodGroup", func(ctx context.Context) error {
		return jobPodGroup(ctx, ns, "too-big", nodes+1, nodes+1)
	})
	eventually(t, time.Minute, "kube-scheduler tried every pod of too-big and bound none", func(ctx context.Context) error {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=too-big"})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				t.Fatalf("pod %s of a gang that cannot fit was bound to %s", p.Name, p.Spec.NodeName)
			}
			tried := false
			for _, c := range p.Status.Conditions {
				tried = tried || (c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse)
			}
			if !tried {
				return fmt.Errorf("pod %s not tried by the scheduler yet", p.Name)
			}
		}
		return nil
	})
	// While the scheduler keeps trying, no claim of the gang holds a GPU.
	time.Sleep(5 * time.Second)
	claims, err := client.ResourceV1().ResourceClaims(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims.Items {
		if c.Status.Allocation != nil && len(c.Status.ReservedFor) > 0 {
			t.Errorf("claim %s of the unplaceable gang holds devices reserved for %v", c.Name, c.Status.ReservedFor)
		}
	}
	pods, _ := client.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "job-name=too-big"})
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" {
			t.Errorf("pod %s of a gang that cannot fit was bound to %s", p.Name, p.Spec.NodeName)
		}
	}
	if len(pods.Items) > 0 {
		t.Logf("pod %s: %s", pods.Items[0].Name, strings.TrimPrefix(schedulingMessage(&pods.Items[0]), ": "))
	}

	if err := client.BatchV1().Jobs(ns).Delete(t.Context(), "too-big", metav1.DeleteOptions{PropagationPolicy: new(metav1.DeletePropagationForeground)}); err != nil {
		t.Fatal(err)
	}
	apply(t, gangJob("fits", ns, "", "tp4", nodes))
	eventually(t, 2*time.Minute, "every pod of a gang that fits runs, one per 4-GPU node", func(ctx context.Context) error {
		if err := jobPodGroup(ctx, ns, "fits", nodes, nodes); err != nil {
			return err
		}
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=fits"})
		if err != nil {
			return err
		}
		used := map[string]bool{}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("pod %s is %s%s", p.Name, p.Status.Phase, schedulingMessage(&p))
			}
			used[p.Spec.NodeName] = true
		}
		if len(used) != nodes {
			return fmt.Errorf("pods on %d nodes, want %d", len(used), nodes)
		}
		return nil
	})
}

// TestKueueGangJobUsesPodGroup: a Job admitted through Kueue and gpudra's topology check is
// bound as a 1.37 PodGroup gang: Kueue admits the whole gang, gpudra pins it, the scheduler
// binds all of it together.
func TestKueueGangJobUsesPodGroup(t *testing.T) {
	inLane(t, clusterLane)
	requireTrainingBlock(t)
	applyForTest(t, decode(t, clusterQueue("e2e-podgroup", true, 64, 32))...)
	ns := namespace(t, "e2e-podgroup-kueue")
	apply(t, `
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: gpudra, namespace: `+ns+`}
spec: {clusterQueue: e2e-podgroup}
`+fourGPUTemplate("tp4", ns)+"---\n"+gangJob("train", ns, "gpudra", "tp4", 4))
	eventually(t, 2*time.Minute, "the gang admitted through Kueue and gpudra runs as one PodGroup", func(ctx context.Context) error {
		if err := jobPodGroup(ctx, ns, "train", 4, 4); err != nil {
			return err
		}
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=train"})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("pod %s is %s%s", p.Name, p.Status.Phase, schedulingMessage(&p))
			}
		}
		return nil
	})
}

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/lab"
	"github.com/gpudra/gpudra/queueing/largefirst"
)

// TestQueueingSamplesDoWhatTheySay applies the ordering samples of deployments/kueue/ as
// their comments say a user does (00-admission-check.yaml and 10-queues.yaml first, then the
// sample) and checks what each comment promises, one sample at a time in team-a's queue.
func TestQueueingSamplesDoWhatTheySay(t *testing.T) {
	inLane(t, clusterLane)
	applyForTest(t, decode(t, sample(t, "00-admission-check.yaml")+"---\n"+sample(t, "10-queues.yaml"))...)

	t.Run("35-pod-priority", func(t *testing.T) {
		applySample(t, "35-pod-priority.yaml", "sweep", "hotfix")
		eventually(t, time.Minute, "sweep's Workload has training-low's priority", priorityFromClass("team-a", "sweep", "training-low", 100))
		eventually(t, time.Minute, "hotfix's Workload has training-high's priority", priorityFromClass("team-a", "hotfix", "training-high", 1000))
		out, err := exec.CommandContext(t.Context(), gpudraCLI, "explain", "job/hotfix", "-n", "team-a", "--kubeconfig", lab.Layout{Root: state.Dir}.Kubeconfig()).CombinedOutput()
		if want := "priority: 1000 (PriorityClass training-high)"; err != nil || !strings.Contains(string(out), want) {
			t.Errorf("gpudra explain job/hotfix (%v) lacks %q:\n%s", err, want, out)
		}
	})
	t.Run("40-pipeline", func(t *testing.T) {
		applySample(t, "40-pipeline.yaml", "preprocess", "train", "evaluate")
		eventually(t, time.Minute, "preprocess is admitted", workloadHas("team-a", "preprocess", kueue.WorkloadAdmitted, ""))
		eventually(t, time.Minute, "train waits at the gate for preprocess", gatedByDependencies("team-a", "train", "preprocess"))
		eventually(t, time.Minute, "evaluate waits at the gate for train", gatedByDependencies("team-a", "evaluate", "train"))
		eventually(t, time.Minute, "preprocess's pod is placed", func(ctx context.Context) error {
			pods, err := client.CoreV1().Pods("team-a").List(ctx, metav1.ListOptions{LabelSelector: "job-name=preprocess"})
			if err != nil {
				return err
			}
			if len(pods.Items) != 1 || pods.Items[0].Spec.NodeName == "" {
				return fmt.Errorf("preprocess has %d pods, none bound yet", len(pods.Items))
			}
			return nil
		})
		endPods(t, "team-a", "preprocess", corev1.PodSucceeded)
		eventually(t, 2*time.Minute, "train is admitted once preprocess has succeeded", workloadHas("team-a", "train", kueue.WorkloadAdmitted, ""))
		if err := gatedByDependencies("team-a", "evaluate", "train")(t.Context()); err != nil {
			t.Errorf("evaluate while train runs: %v", err)
		}
	})
	t.Run("50-large-jobs-first", func(t *testing.T) {
		if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), largefirst.WebhookConfigurationName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			labLacks(t, "gpudra-controller with the gate LargeJobsFirst and its webhook")
		}
		applySample(t, "50-large-jobs-first.yaml", "sweep", "pretrain")
		eventually(t, time.Minute, "the webhook gave pretrain (16 GPUs) the band gpudra-large and left sweep (8) without one", func(ctx context.Context) error {
			if err := jobLabelled(ctx, "team-a", "pretrain", "gpudra-large", "16"); err != nil {
				return err
			}
			return jobLabelled(ctx, "team-a", "sweep", "", "8")
		})
		eventually(t, time.Minute, "pretrain's Workload has the band's priority", func(ctx context.Context) error {
			wl, err := workloadOfJob(ctx, "team-a", "pretrain")
			if err != nil {
				return err
			}
			if ref := wl.Spec.PriorityClassRef; ref == nil || ref.Kind != kueue.WorkloadPriorityClassKind || ref.Name != "gpudra-large" {
				return fmt.Errorf("workload %s: priority class %+v, want WorkloadPriorityClass gpudra-large", wl.Name, ref)
			}
			return nil
		})
	})
}

// sample is the text of deployments/kueue/<name>.
func sample(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repo, "deployments", "kueue", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// applySample applies the sample and, when the subtest ends, deletes it with its Jobs' pods
// and waits until they are gone (the next sample reuses the names and the GPUs).
func applySample(t *testing.T, name string, jobs ...string) {
	t.Helper()
	// Registered before applyForTest's, so it runs after the sample's objects are deleted
	// (which leaves a Job's pods behind).
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		bg := metav1.DeletePropagationBackground
		for _, j := range jobs {
			if err := client.BatchV1().Jobs("team-a").Delete(ctx, j, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete job %s: %v", j, err)
			}
			if err := client.CoreV1().Pods("team-a").DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{LabelSelector: "job-name=" + j}); err != nil {
				t.Errorf("delete job %s's pods: %v", j, err)
			}
		}
		var left string
		err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			for _, j := range jobs {
				if _, err := client.BatchV1().Jobs("team-a").Get(ctx, j, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					left = "job " + j
					return false, nil
				}
				pods, err := client.CoreV1().Pods("team-a").List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + j})
				if err != nil || len(pods.Items) > 0 {
					left = "pods of job " + j
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Errorf("%s: %s still there after 2m", name, left)
		}
	})
	applyForTest(t, decode(t, sample(t, name))...)
}

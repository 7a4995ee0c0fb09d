//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/internal/explain"
	"github.com/gpudra/gpudra/lab"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// kubeflowJob is a training operator kind as a test submits it: its resource, the spec field
// of its replica specs, the container name its webhook wants, and its leading replica type
// besides Worker.
type kubeflowJob struct {
	kind, resource, replicaSpecs, container, leader string
}

// TestPyTorchJobWorkersInOneRack: a PyTorchJob of the Kubeflow training operator through a
// LocalQueue behind the gpudra check, a Master and 4 Workers of one GPU each, the workers
// required in one rack. Kueue makes a pod set of each replica type; the check admits the
// job and pins each pod to its planned node, the training operator creates the pods, and
// all five run with the workers in one rack. `gpudra explain pytorchjob/NAME` shows the
// job's Workload passed the check.
func TestPyTorchJobWorkersInOneRack(t *testing.T) {
	inLane(t, clusterLane)
	kubeflowJobInOneRack(t, kubeflowJob{kind: "PyTorchJob", resource: "pytorchjobs", replicaSpecs: "pytorchReplicaSpecs", container: "pytorch", leader: "Master"})
}

// TestTFJobWorkersInOneRack: the same with a TFJob of a Chief and 4 Workers.
func TestTFJobWorkersInOneRack(t *testing.T) {
	inLane(t, clusterLane)
	kubeflowJobInOneRack(t, kubeflowJob{kind: "TFJob", resource: "tfjobs", replicaSpecs: "tfReplicaSpecs", container: "tensorflow", leader: "Chief"})
}

func kubeflowJobInOneRack(t *testing.T, job kubeflowJob) {
	requireTrainingBlock(t)
	gvr := schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: job.resource}
	if _, err := dyn().Resource(gvr).List(t.Context(), metav1.ListOptions{Limit: 1}); apierrors.IsNotFound(err) {
		labLacks(t, "the Kubeflow training operator's %s (lab file kueue.jobKinds: [%s])", job.kind, strings.ToLower(job.kind))
	}
	lower := strings.ToLower(job.kind)
	jobKind := explain.PyTorchJob
	if job.kind == "TFJob" {
		jobKind = explain.TFJob
	}
	applyForTest(t, decode(t, clusterQueue("e2e-"+lower, true, 16, 8))...)
	ns := namespace(t, "e2e-"+lower)
	name := "train-" + lower
	replicas := func(kind string, n int, annotations string) string {
		return fmt.Sprintf(`
    %s:
      replicas: %d
      restartPolicy: Never
      template:
        metadata:
          annotations: {%s}
        spec:
          terminationGracePeriodSeconds: 0
          schedulingGates: [{name: gpudra.dev/placement}]
          nodeSelector: {%s: hgx-a100-4gpu}
          resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
          containers:
          - name: %s
            image: registry.k8s.io/pause:3.10
            resources:
              requests: {cpu: "1"}
              claims: [{name: gpu}]`, kind, n, annotations, lab.LabelProfile, job.container)
	}
	apply(t, `
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: gpudra, namespace: `+ns+`}
spec: {clusterQueue: e2e-`+lower+`}
`+quotaTemplate(ns, "one-gpu", `{name: gpu, exactly: {deviceClassName: gpu.gpudra.dev, count: 1}}`)+`
---
apiVersion: kubeflow.org/v1
kind: `+job.kind+`
metadata:
  name: `+name+`
  namespace: `+ns+`
  labels: {kueue.x-k8s.io/queue-name: gpudra}
spec:
  runPolicy: {suspend: true}
  `+job.replicaSpecs+`:`+replicas(job.leader, 1, "")+replicas("Worker", 4, api.AnnotationRequiredTopology+": rack")+"\n")
	start := time.Now()
	eventually(t, 2*time.Minute, name+": the gpudra check admits its Workload", func(ctx context.Context) error {
		wls, err := dyn().Resource(workloadsGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, u := range wls.Items {
			var wl kueue.Workload
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &wl); err != nil {
				return err
			}
			if !explain.OwnedBy(&wl, jobKind, name) {
				continue
			}
			if len(wl.Spec.PodSets) != 2 {
				return fmt.Errorf("workload %s has %d pod sets, want %s and worker", wl.Name, len(wl.Spec.PodSets), strings.ToLower(job.leader))
			}
			for _, c := range wl.Status.AdmissionChecks {
				if c.Name == "gpudra-topology" && c.State == kueue.CheckStateReady {
					return nil
				}
			}
			return fmt.Errorf("workload %s: checks %+v", wl.Name, wl.Status.AdmissionChecks)
		}
		return fmt.Errorf("no Kueue workload for %s %s yet", job.kind, name)
	})
	leader := strings.ToLower(job.leader)
	racks := allRunPinned(t, ns, "training.kubeflow.org/job-name="+name, "training.kubeflow.org/replica-type",
		map[string]int{leader: 1, "worker": 4}, "worker")
	if len(racks) != 1 {
		t.Errorf("workers run in racks %v, want one", racks)
	}
	t.Logf("%s: admitted and all 5 pods running %s after submission, workers in rack %v", name, time.Since(start).Round(time.Second), racks)
	out, err := exec.CommandContext(t.Context(), gpudraCLI, "explain", lower+"/"+name, "-n", ns, "--kubeconfig", lab.Layout{Root: state.Dir}.Kubeconfig()).CombinedOutput()
	if want := "check gpudra-topology: Ready"; err != nil || !strings.Contains(string(out), want) {
		t.Errorf("gpudra explain %s/%s (%v) lacks %q:\n%s", lower, name, err, want, out)
	}
	if err := dyn().Resource(gvr).Namespace(ns).Delete(t.Context(), name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		t.Errorf("delete %s %s: %v", job.kind, name, err)
	}
}

package lab

import (
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// trainerConfigDir finds Trainer's manifests/base: in the toolchain cache, else in the Go
// module cache.
func trainerConfigDir(t *testing.T) string {
	t.Helper()
	if out, err := runToolchain(t.Context(), os.Stderr, "--dir", "trainer"); err == nil {
		if d := filepath.Join(strings.TrimSpace(out), "config"); dirExists(d) {
			return d
		}
	}
	if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
		if d := filepath.Join(strings.TrimSpace(string(out)), "github.com", "kubeflow", "trainer", "v2@v2.2.1", "manifests", "base"); dirExists(d) {
			return d
		}
	}
	lacking(t, "Kubeflow Trainer v2.2.1's manifests are neither in the toolchain cache nor in the Go module cache: run lab/toolchain.sh trainer (or go mod download github.com/kubeflow/trainer/v2@v2.2.1)")
	return ""
}

// The lab installs Trainer for a controller out of cluster: its three CRDs, RBAC bound to
// the service account whose name the lab's client certificate carries, its webhooks
// (TrainJob's defaulter and the validators of TrainJobs and both runtime kinds) reaching
// localhost on the lab's port through the ExternalName Service and trusting the lab's CA,
// and the torch runtime a TrainJob of the samples names.
func TestTrainerManifestsServeTheLabsController(t *testing.T) {
	ca := []byte("-----BEGIN CERTIFICATE-----\nlab CA\n-----END CERTIFICATE-----\n")
	crds, rest, runtimes, err := trainerManifests(trainerConfigDir(t), 4444, ca)
	if err != nil {
		t.Fatal(err)
	}
	var crdNames []string
	for _, c := range crds {
		crdNames = append(crdNames, c.GetName())
	}
	if want := []string{"trainjobs.trainer.kubeflow.org", "trainingruntimes.trainer.kubeflow.org", "clustertrainingruntimes.trainer.kubeflow.org"}; !slices.Equal(crdNames, want) {
		t.Errorf("CRDs %v, want %v", crdNames, want)
	}
	kinds := map[string]*unstructured.Unstructured{}
	for _, o := range rest {
		kinds[o.GetKind()+"/"+o.GetName()] = o
	}
	if ns := kinds["Namespace/"+trainerNamespace]; ns == nil {
		t.Errorf("no Namespace %s", trainerNamespace)
	}
	if svc := kinds["Service/"+trainerService]; svc == nil || svc.GetNamespace() != trainerNamespace {
		t.Errorf("no Service %s/%s", trainerNamespace, trainerService)
	} else if name, _, _ := unstructured.NestedString(svc.Object, "spec", "externalName"); name != "localhost" {
		t.Errorf("webhook Service points at %q, want localhost", name)
	}
	binding := kinds["ClusterRoleBinding/kubeflow-trainer-controller-manager"]
	if binding == nil {
		t.Fatalf("no ClusterRoleBinding kubeflow-trainer-controller-manager; got %v", keys(kinds))
	}
	subjects, _, _ := unstructured.NestedSlice(binding.Object, "subjects")
	if len(subjects) != 1 {
		t.Fatalf("binding subjects %v", subjects)
	}
	s := subjects[0].(map[string]any)
	if user := "system:serviceaccount:" + fmt.Sprint(s["namespace"]) + ":" + fmt.Sprint(s["name"]); user != trainerUser {
		t.Errorf("RBAC binds %s, the lab's certificate says %s", user, trainerUser)
	}
	var paths []string
	for _, k := range []string{"MutatingWebhookConfiguration/defaulter.trainer.kubeflow.org", "ValidatingWebhookConfiguration/validator.trainer.kubeflow.org"} {
		hooks := kinds[k]
		if hooks == nil {
			t.Fatalf("no %s; got %v", k, keys(kinds))
		}
		list, _, _ := unstructured.NestedSlice(hooks.Object, "webhooks")
		for _, w := range list {
			w := w.(map[string]any)
			svc, _, _ := unstructured.NestedMap(w, "clientConfig", "service")
			if svc["name"] != trainerService || svc["namespace"] != trainerNamespace || svc["port"] != int64(4444) {
				t.Errorf("webhook service %v", svc)
			}
			paths = append(paths, fmt.Sprint(svc["path"]))
			if got, _, _ := unstructured.NestedString(w, "clientConfig", "caBundle"); got != base64.StdEncoding.EncodeToString(ca) {
				t.Errorf("webhook trusts %q, want the lab's CA", got)
			}
		}
	}
	slices.Sort(paths)
	if want := []string{"/mutate-trainer-kubeflow-org-v1alpha1-trainjob", "/validate-trainer-kubeflow-org-v1alpha1-clustertrainingruntime",
		"/validate-trainer-kubeflow-org-v1alpha1-trainingruntime", "/validate-trainer-kubeflow-org-v1alpha1-trainjob"}; !slices.Equal(paths, want) {
		t.Errorf("webhooks %v, want %v", paths, want)
	}
	if len(runtimes) != 1 || runtimes[0].GetKind() != "ClusterTrainingRuntime" || runtimes[0].GetName() != trainerRuntime {
		t.Fatalf("runtimes %v, want ClusterTrainingRuntime %s", runtimes, trainerRuntime)
	}
	// The probe and the samples' TrainJobs run the runtime's replicated job "node".
	jobs, _, _ := unstructured.NestedSlice(runtimes[0].Object, "spec", "template", "spec", "replicatedJobs")
	if len(jobs) != 1 || jobs[0].(map[string]any)["name"] != "node" {
		t.Errorf("runtime %s's replicated jobs %v, want one named node", trainerRuntime, jobs)
	}
}

// A lab file asks for Trainer (and so for the trainer component) only with trainjob in
// kueue.jobKinds and Kueue on.
func TestLabRunsTrainerOnlyForTrainJob(t *testing.T) {
	for _, tc := range []struct {
		spec KueueSpec
		want bool
	}{
		{KueueSpec{Enabled: true, JobKinds: []string{JobKindJobSet, JobKindTrainJob}}, true},
		{KueueSpec{Enabled: true, JobKinds: []string{JobKindJobSet, JobKindPyTorchJob}}, false},
		{KueueSpec{JobKinds: []string{JobKindJobSet, JobKindTrainJob}}, false},
	} {
		if got := tc.spec.runsTrainer(); got != tc.want {
			t.Errorf("%+v: runs Trainer %v, want %v", tc.spec, got, tc.want)
		}
	}
}

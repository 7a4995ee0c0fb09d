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

// trainingOperatorConfigDir finds the training operator's manifests/base: in the toolchain
// cache, else in the Go module cache.
func trainingOperatorConfigDir(t *testing.T) string {
	t.Helper()
	if out, err := runToolchain(t.Context(), os.Stderr, "--dir", "trainingoperator"); err == nil {
		if d := filepath.Join(strings.TrimSpace(out), "config"); dirExists(d) {
			return d
		}
	}
	if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
		if d := filepath.Join(strings.TrimSpace(string(out)), "github.com", "kubeflow", "training-operator@v1.9.3", "manifests", "base"); dirExists(d) {
			return d
		}
	}
	lacking(t, "the training operator v1.9.3 manifests are neither in the toolchain cache nor in the Go module cache: run lab/toolchain.sh trainingoperator (or go mod download github.com/kubeflow/training-operator@v1.9.3)")
	return ""
}

// The lab installs the training operator for the kinds it runs, for a controller out of
// cluster: their CRDs alone, their validating webhooks (and no other kind's, whose
// controller does not run) reaching localhost on the lab's port through the ExternalName
// Service and trusting the lab's CA, and RBAC bound to the service account whose name the
// lab's client certificate carries.
func TestTrainingOperatorManifestsServeTheLabsController(t *testing.T) {
	ca := []byte("-----BEGIN CERTIFICATE-----\nlab CA\n-----END CERTIFICATE-----\n")
	crds, rest, err := trainingOperatorManifests(trainingOperatorConfigDir(t), []string{"PyTorchJob", "TFJob"}, 4343, ca)
	if err != nil {
		t.Fatal(err)
	}
	if len(crds) != 2 || crds[0].GetName() != "pytorchjobs.kubeflow.org" || crds[1].GetName() != "tfjobs.kubeflow.org" {
		t.Errorf("CRDs %v, want pytorchjobs.kubeflow.org and tfjobs.kubeflow.org", crds)
	}
	kinds := map[string]*unstructured.Unstructured{}
	for _, o := range rest {
		kinds[o.GetKind()+"/"+o.GetName()] = o
	}
	if svc := kinds["Service/"+trainingOperatorService]; svc == nil || svc.GetNamespace() != trainingOperatorNamespace {
		t.Errorf("no Service %s/%s", trainingOperatorNamespace, trainingOperatorService)
	} else if name, _, _ := unstructured.NestedString(svc.Object, "spec", "externalName"); name != "localhost" {
		t.Errorf("webhook Service points at %q, want localhost", name)
	}
	binding := kinds["ClusterRoleBinding/training-operator"]
	if binding == nil {
		t.Fatal("no ClusterRoleBinding training-operator")
	}
	subjects, _, _ := unstructured.NestedSlice(binding.Object, "subjects")
	if len(subjects) != 1 {
		t.Fatalf("binding subjects %v", subjects)
	}
	s := subjects[0].(map[string]any)
	if user := "system:serviceaccount:" + s["namespace"].(string) + ":" + s["name"].(string); user != trainingOperatorUser {
		t.Errorf("RBAC binds %s, the lab's certificate says %s", user, trainingOperatorUser)
	}
	if kinds["ClusterRole/training-operator"] == nil {
		t.Error("no ClusterRole training-operator")
	}
	hooks := kinds["ValidatingWebhookConfiguration/validator.training-operator.kubeflow.org"]
	if hooks == nil {
		t.Fatalf("no ValidatingWebhookConfiguration; got %v", keys(kinds))
	}
	list, _, _ := unstructured.NestedSlice(hooks.Object, "webhooks")
	var paths []string
	for _, w := range list {
		w := w.(map[string]any)
		svc, _, _ := unstructured.NestedMap(w, "clientConfig", "service")
		if svc["name"] != trainingOperatorService || svc["namespace"] != trainingOperatorNamespace || svc["port"] != int64(4343) {
			t.Errorf("webhook service %v", svc)
		}
		paths = append(paths, fmt.Sprint(svc["path"]))
		if got, _, _ := unstructured.NestedString(w, "clientConfig", "caBundle"); got != base64.StdEncoding.EncodeToString(ca) {
			t.Errorf("webhook trusts %q, want the lab's CA", got)
		}
	}
	if want := []string{"/validate-kubeflow-org-v1-pytorchjob", "/validate-kubeflow-org-v1-tfjob"}; !slices.Equal(paths, want) {
		t.Errorf("webhooks %v, want those of the kinds the lab runs only, %v", paths, want)
	}
}

func keys(m map[string]*unstructured.Unstructured) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

package lab

import (
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// jobsetConfigDir finds JobSet's config/components: in the toolchain cache, else in the Go
// module cache.
func jobsetConfigDir(t *testing.T) string {
	t.Helper()
	if out, err := runToolchain(t.Context(), os.Stderr, "--dir", "jobset"); err == nil {
		if d := filepath.Join(strings.TrimSpace(out), "config"); dirExists(d) {
			return d
		}
	}
	if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
		if d := filepath.Join(strings.TrimSpace(string(out)), "sigs.k8s.io", "jobset@v0.12.0", "config", "components"); dirExists(d) {
			return d
		}
	}
	lacking(t, "JobSet v0.12.0 manifests are neither in the toolchain cache nor in the Go module cache: run lab/toolchain.sh jobset (or go mod download sigs.k8s.io/jobset@v0.12.0)")
	return ""
}

// The lab installs JobSet as its kustomization does, for a controller out of cluster: its
// webhooks reach localhost on the lab's port through the ExternalName Service and trust the
// lab's CA, its pod webhooks see only a JobSet's pods, and the lab's client certificate user
// is the service account its RBAC binds.
func TestJobSetManifestsServeTheLabsController(t *testing.T) {
	ca := []byte("-----BEGIN CERTIFICATE-----\nlab CA\n-----END CERTIFICATE-----\n")
	crds, rest, err := jobsetManifests(jobsetConfigDir(t), 4242, ca)
	if err != nil {
		t.Fatal(err)
	}
	if len(crds) != 1 || crds[0].GetName() != "jobsets.jobset.x-k8s.io" {
		t.Errorf("CRDs %v, want jobsets.jobset.x-k8s.io", crds)
	}
	kinds := map[string]*unstructured.Unstructured{}
	for _, o := range rest {
		kinds[o.GetKind()+"/"+o.GetName()] = o
	}
	svc := kinds["Service/"+jobsetService]
	if svc == nil || svc.GetNamespace() != jobsetNamespace {
		t.Fatalf("no Service %s/%s", jobsetNamespace, jobsetService)
	}
	if name, _, _ := unstructured.NestedString(svc.Object, "spec", "externalName"); name != "localhost" {
		t.Errorf("webhook Service points at %q, want localhost", name)
	}
	binding := kinds["ClusterRoleBinding/jobset-manager-rolebinding"]
	if binding == nil {
		t.Fatal("no ClusterRoleBinding jobset-manager-rolebinding")
	}
	subjects, _, _ := unstructured.NestedSlice(binding.Object, "subjects")
	s := subjects[0].(map[string]any)
	if got := "system:serviceaccount:" + s["namespace"].(string) + ":" + s["name"].(string); got != jobsetUser {
		t.Errorf("JobSet's RBAC binds %s, the lab's client certificate is %s", got, jobsetUser)
	}
	sawPod := false
	for _, k := range []string{"MutatingWebhookConfiguration/jobset-mutating-webhook-configuration", "ValidatingWebhookConfiguration/jobset-validating-webhook-configuration"} {
		if kinds[k] == nil {
			t.Fatalf("no %s", k)
		}
		hooks, _, _ := unstructured.NestedSlice(kinds[k].Object, "webhooks")
		for _, h := range hooks {
			m := h.(map[string]any)
			svc, _, _ := unstructured.NestedMap(m, "clientConfig", "service")
			if svc["name"] != jobsetService || svc["namespace"] != jobsetNamespace || svc["port"] != int64(4242) {
				t.Errorf("%s: webhook %s goes to %v, want %s/%s port 4242", k, m["name"], svc, jobsetNamespace, jobsetService)
			}
			if bundle, _, _ := unstructured.NestedString(m, "clientConfig", "caBundle"); bundle != base64.StdEncoding.EncodeToString(ca) {
				t.Errorf("%s: webhook %s trusts %q, not the lab's CA", k, m["name"], bundle)
			}
			if strings.HasSuffix(svc["path"].(string), "--v1-pod") {
				sawPod = true
				exprs, _, _ := unstructured.NestedSlice(m, "objectSelector", "matchExpressions")
				if len(exprs) != 1 || exprs[0].(map[string]any)["key"] != labelJobSetName {
					t.Errorf("%s: pod webhook %s sees every Pod (objectSelector %v)", k, m["name"], m["objectSelector"])
				}
			}
		}
	}
	if !sawPod {
		t.Error("JobSet's pod webhooks are missing")
	}
}

// The lab's JobSet configuration is the shipped one with the lab's addresses and certificate
// folder: no leader election, no certificate management of its own.
func TestJobSetLabConfig(t *testing.T) {
	data, err := jobsetLabConfig(jobsetConfigDir(t), "/certs", func(name string) int {
		return map[string]int{"jobset-health": 1, "jobset-webhook": 2}[name]
	})
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Kind    string `json:"kind"`
		Webhook struct {
			Host    string `json:"host"`
			Port    int    `json:"port"`
			CertDir string `json:"certDir"`
		} `json:"webhook"`
		Health struct {
			HealthProbeBindAddress string `json:"healthProbeBindAddress"`
		} `json:"health"`
		LeaderElection struct {
			LeaderElect bool `json:"leaderElect"`
		} `json:"leaderElection"`
		InternalCertManagement struct {
			Enable *bool `json:"enable"`
		} `json:"internalCertManagement"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Kind != "Configuration" || cfg.Webhook.Host != "127.0.0.1" || cfg.Webhook.Port != 2 || cfg.Webhook.CertDir != "/certs" ||
		cfg.Health.HealthProbeBindAddress != "127.0.0.1:1" || cfg.LeaderElection.LeaderElect {
		t.Errorf("configuration:\n%s", data)
	}
	if e := cfg.InternalCertManagement.Enable; e == nil || *e {
		t.Errorf("internalCertManagement.enable is not false: JobSet would wait for its certificate in /tmp\n%s", data)
	}
}

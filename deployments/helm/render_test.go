//go:build e2e

package helm_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/yaml"
)

const (
	chartDir  = "gpudra"
	namespace = "gpudra"
	// kubeVersion is what the chart is rendered for (the lab's Kubernetes).
	kubeVersion = "v1.37.2"
	// buildHelm is the command that builds and caches the helm binary.
	buildHelm = "lab/toolchain.sh helm"
)

// kinds maps every kind the chart may render to its real API type; anything else fails.
var kinds = map[string]func() any{
	"ServiceAccount":                   func() any { return &corev1.ServiceAccount{} },
	"Service":                          func() any { return &corev1.Service{} },
	"ConfigMap":                        func() any { return &corev1.ConfigMap{} },
	"Secret":                           func() any { return &corev1.Secret{} },
	"PodDisruptionBudget":              func() any { return &policyv1.PodDisruptionBudget{} },
	"Namespace":                        func() any { return &corev1.Namespace{} },
	"DaemonSet":                        func() any { return &appsv1.DaemonSet{} },
	"Deployment":                       func() any { return &appsv1.Deployment{} },
	"ClusterRole":                      func() any { return &rbacv1.ClusterRole{} },
	"ClusterRoleBinding":               func() any { return &rbacv1.ClusterRoleBinding{} },
	"Role":                             func() any { return &rbacv1.Role{} },
	"RoleBinding":                      func() any { return &rbacv1.RoleBinding{} },
	"DeviceClass":                      func() any { return &resourceapi.DeviceClass{} },
	"ValidatingAdmissionPolicy":        func() any { return &admissionv1.ValidatingAdmissionPolicy{} },
	"ValidatingAdmissionPolicyBinding": func() any { return &admissionv1.ValidatingAdmissionPolicyBinding{} },
	"ValidatingWebhookConfiguration":   func() any { return &admissionv1.ValidatingWebhookConfiguration{} },
	"AdmissionCheck":                   func() any { return &kueue.AdmissionCheck{} },
	"ResourceFlavor":                   func() any { return &kueue.ResourceFlavor{} },
	"ClusterQueue":                     func() any { return &kueue.ClusterQueue{} },
	"LocalQueue":                       func() any { return &kueue.LocalQueue{} },
	"WorkloadPriorityClass":            func() any { return &kueue.WorkloadPriorityClass{} },
}

// manifest is the set of objects one rendering or one folder of manifests holds.
type manifest struct {
	objs []decoded
}

type decoded struct {
	kind, namespace, name string
	obj                   any
}

// get returns the object of that kind and name, or nil.
func (m manifest) get(kind, name string) any {
	for _, o := range m.objs {
		if o.kind == kind && o.name == name {
			return o.obj
		}
	}
	return nil
}

// getIn returns the object of that kind, namespace and name, or nil.
func (m manifest) getIn(kind, ns, name string) any {
	for _, o := range m.objs {
		if o.kind == kind && o.namespace == ns && o.name == name {
			return o.obj
		}
	}
	return nil
}

// all returns every object of a kind.
func (m manifest) all(kind string) []any {
	var out []any
	for _, o := range m.objs {
		if o.kind == kind {
			out = append(out, o.obj)
		}
	}
	return out
}

func (m manifest) names(kind string) []string {
	var out []string
	for _, o := range m.objs {
		if o.kind == kind {
			out = append(out, o.name)
		}
	}
	return out
}

// decodeManifest splits a multi-document YAML stream and decodes every document strictly
// into its real API type (unknown fields and unknown kinds are errors).
func decodeManifest(data []byte) (manifest, error) {
	var m manifest
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return m, nil
		}
		if err != nil {
			return m, err
		}
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return m, err
		}
		if meta.Kind == "" {
			continue // an empty document (comments only)
		}
		newObj, ok := kinds[meta.Kind]
		if !ok {
			return m, fmt.Errorf("%s %s: a kind the chart tests do not know; add it to kinds", meta.Kind, meta.Metadata.Name)
		}
		obj := newObj()
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return m, fmt.Errorf("%s %s: %w", meta.Kind, meta.Metadata.Name, err)
		}
		m.objs = append(m.objs, decoded{kind: meta.Kind, namespace: meta.Metadata.Namespace, name: meta.Metadata.Name, obj: obj})
	}
}

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helmBinary returns the helm binary cached by lab/toolchain.sh (GPUDRA_HELM names
// another one). A cold build takes over 8 minutes on 2 shared cores: make test builds it
// (make toolchain) before the tests. When helm is not cached the chart tests fail, naming
// the command that builds it, unless GPUDRA_HELM_BUILD=1 asks them to build it first.
func helmBinary(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() {
		if p := os.Getenv("GPUDRA_HELM"); p != "" {
			helmPath = p
			return
		}
		script := filepath.Join("..", "..", "lab", "toolchain.sh")
		out, err := exec.Command("bash", script, "--dir", "helm").Output()
		if err != nil {
			helmErr = fmt.Errorf("%s --dir helm: %w", script, err)
			return
		}
		helmPath = filepath.Join(strings.TrimSpace(string(out)), "bin", "helm")
		if _, err := os.Stat(helmPath); err == nil {
			return
		}
		if os.Getenv("GPUDRA_HELM_BUILD") != "1" {
			helmErr = fmt.Errorf("helm is not cached at %s: build it once with make toolchain (or `%s`, ~10 min cold on 2 cores), or run the tests with GPUDRA_HELM_BUILD=1 to build it first", helmPath, buildHelm)
			return
		}
		cmd := exec.Command("bash", script, "helm")
		var log bytes.Buffer
		cmd.Stdout, cmd.Stderr = &log, &log
		if err := cmd.Run(); err != nil {
			helmErr = fmt.Errorf("building helm (%s): %w\n%s", buildHelm, err, log.String())
		}
	})
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	return helmPath
}

// helm runs the helm binary; it fails the test with helm's output on error.
func helm(t *testing.T, args ...string) string {
	t.Helper()
	out, err := helmCmd(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func helmCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBinary(t), args...)
	// Keep helm away from the user's configuration and caches.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home, "KUBECONFIG="+filepath.Join(home, "none"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// render runs `helm template` with the values in sets (--set-json when a value starts with
// [ or {, else --set) and decodes the result.
func render(t *testing.T, sets ...string) manifest {
	t.Helper()
	out := helm(t, templateArgs(sets)...)
	m, err := decodeManifest([]byte(out))
	if err != nil {
		t.Fatalf("rendered chart with %v: %v", sets, err)
	}
	return m
}

func templateArgs(sets []string) []string {
	return append([]string{"template", "gpudra", chartDir, "--namespace", namespace, "--kube-version", kubeVersion}, setArgs(sets)...)
}

// setArgs turns key=value pairs into --set (or --set-json for JSON lists and objects).
func setArgs(sets []string) []string {
	var args []string
	for _, s := range sets {
		_, v, _ := strings.Cut(s, "=")
		if strings.HasPrefix(v, "[") || strings.HasPrefix(v, "{") {
			args = append(args, "--set-json", s)
		} else {
			args = append(args, "--set", s)
		}
	}
	return args
}

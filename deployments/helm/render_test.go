package helm_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/internal/helmchart"
	"sigs.k8s.io/yaml"
)

const (
	chartDir  = "gpudra"
	namespace = "gpudra"
	// kubeVersion is what the chart is rendered for (the lab's Kubernetes).
	kubeVersion = "v1.37.2"
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
	"MutatingWebhookConfiguration":     func() any { return &admissionv1.MutatingWebhookConfiguration{} },
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

// template renders the chart as `helm template gpudra` with the values in sets (JSON
// when a value starts with [ or {), through Helm's Go SDK. On error the output is the
// error's text, which names what the chart refused.
func template(t *testing.T, sets []string) (string, error) {
	t.Helper()
	out, err := helmchart.Render(chartDir, helmchart.Options{Release: "gpudra", Namespace: namespace, KubeVersion: kubeVersion}, helmchart.SetArgs(sets))
	if err != nil {
		return err.Error(), err
	}
	return out, nil
}

// render renders the chart with the values in sets and decodes the result.
func render(t *testing.T, sets ...string) manifest {
	t.Helper()
	out, err := template(t, sets)
	if err != nil {
		t.Fatalf("rendering the chart with %v: %v", sets, err)
	}
	m, err := decodeManifest([]byte(out))
	if err != nil {
		t.Fatalf("rendered chart with %v: %v", sets, err)
	}
	return m
}

package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// kueueManifests renders what Kueue's config/default kustomization would install, for the lab:
// the CRDs (with the conversion webhooks Kueue's crd/kustomization.yaml patches in), the
// namespace, RBAC, the webhook Secret, an ExternalName webhook Service pointing at localhost,
// and the webhook configurations limited to what the lab serves. Names get Kueue's "kueue-"
// prefix and namespaced objects land in kueue-system, as the kustomization does.
func kueueManifests(configDir string, webhookPort int) (crds, rest []*unstructured.Unstructured, err error) {
	read := manifestReader(configDir)
	conversion, err := kueueConversionCRDs(configDir)
	if err != nil {
		return nil, nil, err
	}
	bases, err := filepath.Glob(filepath.Join(configDir, "crd", "bases", "*.yaml"))
	if err != nil || len(bases) == 0 {
		return nil, nil, fmt.Errorf("no CRDs under crd/bases")
	}
	for _, b := range bases {
		objs, err := read(strings.TrimPrefix(b, configDir+"/"))
		if err != nil {
			return nil, nil, err
		}
		for _, o := range objs {
			if conversion[o.GetName()] {
				_ = unstructured.SetNestedField(o.Object, map[string]any{
					"strategy": "Webhook",
					"webhook": map[string]any{
						"conversionReviewVersions": []any{"v1"},
						"clientConfig":             map[string]any{"service": kueueServiceRef("/convert", webhookPort)},
					},
				}, "spec", "conversion")
			}
			crds = append(crds, o)
		}
	}

	if rest, err = kustomizedObjects(read, kustomization{prefix: kueuePrefix, namespace: kueueNamespace},
		"rbac/service_account.yaml", "rbac/role.yaml", "rbac/role_binding.yaml",
		"rbac/manager_secrets_role.yaml", "rbac/manager_secrets_role_binding.yaml", "internalcert/secret.yaml"); err != nil {
		return nil, nil, err
	}
	rest = append(rest, localhostWebhookService(kueueNamespace, kueueService, webhookPort))
	hooks, err := read("webhook/manifests.yaml")
	if err != nil {
		return nil, nil, err
	}
	for _, o := range hooks {
		o = kustomizeKueue(o)
		list, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		var kept []any
		for _, w := range list {
			m, _ := w.(map[string]any)
			path, _, _ := unstructured.NestedString(m, "clientConfig", "service", "path")
			if !kueueWebhookKept(path) {
				continue
			}
			_ = unstructured.SetNestedField(m, kueueServiceRef(path, webhookPort), "clientConfig", "service")
			kept = append(kept, m)
		}
		_ = unstructured.SetNestedSlice(o.Object, kept, "webhooks")
		rest = append(rest, o)
	}
	return crds, rest, nil
}

func kueueServiceRef(path string, port int) map[string]any {
	return map[string]any{"namespace": kueueNamespace, "name": kueueService, "path": path, "port": int64(port)}
}

// kustomizeKueue applies Kueue's namePrefix and namespace transformations to one object.
func kustomizeKueue(o *unstructured.Unstructured) *unstructured.Unstructured {
	return kustomization{prefix: kueuePrefix, namespace: kueueNamespace}.apply(o)
}

// kustomization is what a controller's config/default kustomization does to the objects of
// its config/components: a name prefix, and its namespace for namespaced objects.
type kustomization struct{ prefix, namespace string }

// apply applies the namePrefix and namespace transformations to one object.
func (k kustomization) apply(o *unstructured.Unstructured) *unstructured.Unstructured {
	kueuePrefix, kueueNamespace := k.prefix, k.namespace
	o.SetName(kueuePrefix + o.GetName())
	switch o.GetKind() {
	case "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
	default:
		o.SetNamespace(kueueNamespace)
	}
	// A role's resourceNames that name the webhook configurations follow their prefixed
	// names, as kustomize's name references do (a controller may update only its own).
	if rules, ok, _ := unstructured.NestedSlice(o.Object, "rules"); ok {
		for _, r := range rules {
			m, _ := r.(map[string]any)
			resources, _ := m["resources"].([]any)
			names, _ := m["resourceNames"].([]any)
			if len(names) == 0 || !slices.ContainsFunc(resources, func(r any) bool {
				return r == "mutatingwebhookconfigurations" || r == "validatingwebhookconfigurations"
			}) {
				continue
			}
			for k, n := range names {
				names[k] = kueuePrefix + fmt.Sprint(n)
			}
		}
		_ = unstructured.SetNestedSlice(o.Object, rules, "rules")
	}
	if ref, ok, _ := unstructured.NestedString(o.Object, "roleRef", "name"); ok {
		_ = unstructured.SetNestedField(o.Object, kueuePrefix+ref, "roleRef", "name")
	}
	if subjects, ok, _ := unstructured.NestedSlice(o.Object, "subjects"); ok {
		for _, s := range subjects {
			m, _ := s.(map[string]any)
			m["name"] = kueuePrefix + fmt.Sprint(m["name"])
			if m["kind"] == "ServiceAccount" {
				m["namespace"] = kueueNamespace
			}
		}
		_ = unstructured.SetNestedSlice(o.Object, subjects, "subjects")
	}
	return o
}

// kueueConversionCRDs lists the CRDs whose conversion webhook Kueue's crd/kustomization.yaml
// patches in (the patches it does not comment out).
func kueueConversionCRDs(configDir string) (map[string]bool, error) {
	data, err := os.ReadFile(filepath.Join(configDir, "crd", "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	var k struct {
		Patches []struct {
			Path string `json:"path"`
		} `json:"patches"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		return nil, fmt.Errorf("crd/kustomization.yaml: %w", err)
	}
	out := map[string]bool{}
	for _, p := range k.Patches {
		if !strings.Contains(p.Path, "webhook_in_") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(configDir, "crd", p.Path))
		if err != nil {
			return nil, err
		}
		var patch struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(data, &patch); err != nil {
			return nil, fmt.Errorf("crd/%s: %w", p.Path, err)
		}
		out[patch.Metadata.Name] = true
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

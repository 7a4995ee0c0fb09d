package helm_test

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/diff"
)

func controllerOf(t *testing.T, m manifest) (*appsv1.Deployment, corev1.Container) {
	t.Helper()
	d, ok := m.get("Deployment", "gpudra-controller").(*appsv1.Deployment)
	if !ok {
		t.Fatal("no Deployment gpudra-controller")
	}
	return d, d.Spec.Template.Spec.Containers[0]
}

func volumeOf(spec corev1.PodSpec, name string) *corev1.Volume {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	return nil
}

// TestControllerIsHighlyAvailable: two replicas by default, rolled one new pod at a time with
// none taken down first, kept through drains by a PodDisruptionBudget, spread over nodes, and
// electing their leader on a named Lease in the release namespace; one replica gets no budget
// (it would block every drain).
func TestControllerIsHighlyAvailable(t *testing.T) {
	m := render(t)
	d, c := controllerOf(t, m)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", d.Spec.Replicas)
	}
	ru := d.Spec.Strategy.RollingUpdate
	if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil || ru.MaxUnavailable.IntValue() != 0 || ru.MaxSurge.IntValue() != 1 {
		t.Errorf("strategy %+v, want RollingUpdate with maxSurge 1, maxUnavailable 0", d.Spec.Strategy)
	}
	for _, arg := range []string{"--leader-elect", "--leader-election-id=gpudra-controller", "--leader-election-namespace=gpudra"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("controller args %v lack %s", c.Args, arg)
		}
	}
	pdb, ok := m.get("PodDisruptionBudget", "gpudra-controller").(*policyv1.PodDisruptionBudget)
	if !ok {
		t.Fatal("no PodDisruptionBudget for two replicas")
	}
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 || pdb.Spec.MaxUnavailable != nil {
		t.Errorf("budget %+v, want minAvailable 1", pdb.Spec)
	}
	if !apiequality.Semantic.DeepEqual(pdb.Spec.Selector, d.Spec.Selector) {
		t.Errorf("budget selects %v, the Deployment %v", pdb.Spec.Selector, d.Spec.Selector)
	}
	aff := d.Spec.Template.Spec.Affinity
	if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
		aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey != "kubernetes.io/hostname" {
		t.Errorf("affinity %+v, want the replicas to prefer different nodes", aff)
	}
	own := render(t, `controller.affinity={"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"role","operator":"In","values":["infra"]}]}]}}}`)
	if od, _ := controllerOf(t, own); od.Spec.Template.Spec.Affinity.PodAntiAffinity != nil || od.Spec.Template.Spec.Affinity.NodeAffinity == nil {
		t.Errorf("controller.affinity set: affinity %+v, want exactly the value's", od.Spec.Template.Spec.Affinity)
	}

	one := render(t, "controller.replicas=1")
	if od, _ := controllerOf(t, one); *od.Spec.Replicas != 1 || od.Spec.Template.Spec.Affinity != nil {
		t.Errorf("controller.replicas=1: replicas %d, affinity %+v", *od.Spec.Replicas, od.Spec.Template.Spec.Affinity)
	}
	if one.get("PodDisruptionBudget", "gpudra-controller") != nil {
		t.Error("a budget of minAvailable 1 for one replica blocks every node drain")
	}
}

// TestControllerRBAC proves the controller's roles hold exactly the verbs its code uses for
// the values given: ConfigMaps only by name in the release namespace and only with a topology
// ConfigMap, node patches only to label nodes from it, Secrets only for the rotated webhook
// certificate, token and access reviews only for secure metrics.
func TestControllerRBAC(t *testing.T) {
	base := map[string][]string{
		"resource.k8s.io/resourceslices":         {"list", "watch"},
		"resource.k8s.io/resourceclaims":         {"list", "watch"},
		"resource.k8s.io/resourceclaimtemplates": {"list", "watch"},
		"resource.k8s.io/deviceclasses":          {"list", "watch"},
		"/nodes":                                 {"list", "watch"},
		"/persistentvolumeclaims":                {"list", "watch"},
		"/persistentvolumes":                     {"list", "watch"},
		"/pods":                                  {"list", "update", "watch"},
		"events.k8s.io/events":                   {"create", "patch"},
		"kueue.x-k8s.io/workloads":               {"get", "list", "watch"},
		"kueue.x-k8s.io/workloads/status":        {"update"},
		"kueue.x-k8s.io/admissionchecks":         {"list", "watch"},
		"kueue.x-k8s.io/admissionchecks/status":  {"update"},
		"kueue.x-k8s.io/topologies":              {"create", "delete", "list", "watch"},
		"kueue.x-k8s.io/resourceflavors":         {"list", "watch"},
	}
	with := func(extra map[string][]string) map[string][]string {
		out := map[string][]string{}
		for k, v := range base {
			out[k] = v
		}
		for k, v := range extra {
			out[k] = v
		}
		return out
	}
	webhookCA := map[string][]string{"admissionregistration.k8s.io/validatingwebhookconfigurations": {"get", "update"}}
	rotated := map[string][]string{"admissionregistration.k8s.io/validatingwebhookconfigurations": {"get", "list", "update", "watch"}}
	reviews := map[string][]string{"authentication.k8s.io/tokenreviews": {"create"}, "authorization.k8s.io/subjectaccessreviews": {"create"}}
	lease := map[string][]string{"coordination.k8s.io/leases": {"create", "get", "update"}, "/events": {"create", "patch"}}
	merge := func(ms ...map[string][]string) map[string][]string {
		out := map[string][]string{}
		for _, m := range ms {
			for k, v := range m {
				all := slices.Concat(out[k], v)
				slices.Sort(all)
				out[k] = slices.Compact(all)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name        string
		sets        []string
		cluster     map[string][]string
		namespaced  map[string][]string
		names       map[string][]string // resourceNames by resource, in the Role
		metricsRole bool
	}{
		{"defaults", nil, with(merge(rotated, reviews)),
			merge(lease, map[string][]string{"/secrets": {"list", "update", "watch"}}),
			map[string][]string{"leases": {"gpudra-controller"}, "secrets": {"gpudra-webhook-cert"}}, true},
		{"topology ConfigMap and flavor", valueSets["hami topology"],
			with(merge(rotated, reviews, map[string][]string{"/nodes": {"list", "patch", "watch"}, "kueue.x-k8s.io/resourceflavors": {"create", "list", "watch"}})),
			merge(lease, map[string][]string{"/secrets": {"list", "update", "watch"}, "/configmaps": {"list", "watch"}}),
			map[string][]string{"leases": {"gpudra-controller"}, "secrets": {"gpudra-webhook-cert"}, "configmaps": {"gpudra-topology"}}, true},
		{"existing topology ConfigMap", []string{"topology.existingConfigMap=racks"},
			with(merge(rotated, reviews, map[string][]string{"/nodes": {"list", "patch", "watch"}})),
			merge(lease, map[string][]string{"/secrets": {"list", "update", "watch"}, "/configmaps": {"list", "watch"}}),
			map[string][]string{"leases": {"gpudra-controller"}, "secrets": {"gpudra-webhook-cert"}, "configmaps": {"racks"}}, true},
		{"self-signed", selfSignedValues, with(merge(webhookCA, reviews)), lease, map[string][]string{"leases": {"gpudra-controller"}}, true},
		{"own webhook certificate", valueSets["own webhook"], with(reviews), lease, map[string][]string{"leases": {"gpudra-controller"}}, true},
		{"plain metrics", valueSets["plain metrics"], with(rotated),
			merge(lease, map[string][]string{"/secrets": {"list", "update", "watch"}}),
			map[string][]string{"leases": {"gpudra-controller"}, "secrets": {"gpudra-webhook-cert"}}, false},
		{"no webhook", valueSets["no webhook"], with(reviews), lease, map[string][]string{"leases": {"gpudra-controller"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := render(t, tc.sets...)
			cr := m.get("ClusterRole", "gpudra-controller").(*rbacv1.ClusterRole)
			if got := verbsByResource(cr); !apiequality.Semantic.DeepEqual(got, tc.cluster) {
				t.Errorf("ClusterRole gpudra-controller:\n%s", diff.Diff(tc.cluster, got))
			}
			for _, rule := range cr.Rules {
				if slices.Contains(rule.Resources, "validatingwebhookconfigurations") && slices.Contains(rule.Verbs, "update") && !slices.Equal(rule.ResourceNames, []string{"gpudra-config-validation"}) {
					t.Errorf("the controller may update webhook configurations other than its own: %+v", rule)
				}
			}
			role, ok := m.getIn("Role", namespace, "gpudra-controller").(*rbacv1.Role)
			if !ok {
				t.Fatal("no Role gpudra-controller in the release namespace")
			}
			if got := verbsByRules(role.Rules); !apiequality.Semantic.DeepEqual(got, tc.namespaced) {
				t.Errorf("Role gpudra-controller:\n%s", diff.Diff(tc.namespaced, got))
			}
			names := map[string][]string{}
			for _, rule := range role.Rules {
				for _, res := range rule.Resources {
					names[res] = slices.Concat(names[res], rule.ResourceNames)
				}
				// Only what cannot be named is granted without a name: creating the Lease,
				// events, and cert-controller's watch of its namespace's Secrets.
				if len(rule.ResourceNames) == 0 && !slices.Equal(rule.Verbs, []string{"create"}) && !slices.Contains(rule.Resources, "events") &&
					!(slices.Equal(rule.Resources, []string{"secrets"}) && slices.Equal(rule.Verbs, []string{"list", "watch"})) {
					t.Errorf("Role rule without resourceNames: %+v", rule)
				}
			}
			for res := range names {
				if len(names[res]) == 0 {
					delete(names, res)
				}
			}
			if !apiequality.Semantic.DeepEqual(names, tc.names) {
				t.Errorf("Role resourceNames:\n%s", diff.Diff(tc.names, names))
			}
			if b, ok := m.getIn("RoleBinding", namespace, "gpudra-controller").(*rbacv1.RoleBinding); !ok || b.RoleRef.Name != "gpudra-controller" || b.RoleRef.Kind != "Role" ||
				len(b.Subjects) != 1 || b.Subjects[0].Name != "gpudra-controller" || b.Subjects[0].Namespace != namespace {
				t.Errorf("RoleBinding gpudra-controller = %+v", b)
			}
			reader, _ := m.get("ClusterRole", "gpudra-controller-metrics-reader").(*rbacv1.ClusterRole)
			if (reader != nil) != tc.metricsRole {
				t.Fatalf("ClusterRole gpudra-controller-metrics-reader rendered = %v, want %v", reader != nil, tc.metricsRole)
			}
			if reader != nil && (len(reader.Rules) != 1 || !slices.Equal(reader.Rules[0].NonResourceURLs, []string{"/metrics"}) || !slices.Equal(reader.Rules[0].Verbs, []string{"get"})) {
				t.Errorf("metrics reader rules %+v, want get on /metrics only", reader.Rules)
			}
		})
	}
}

// TestControllerMetrics: by default the metrics are HTTPS on 8443 behind authentication and
// authorization (the Service says so); a certificate Secret is mounted when given; plain
// metrics stay possible.
func TestControllerMetrics(t *testing.T) {
	m := render(t)
	d, c := controllerOf(t, m)
	for _, arg := range []string{"--metrics-bind-address=:8443", "--metrics-secure"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("controller args %v lack %s", c.Args, arg)
		}
	}
	svc := m.get("Service", "gpudra-controller").(*corev1.Service)
	if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool {
		return p.Name == "metrics" && p.Port == 8443 && p.AppProtocol != nil && *p.AppProtocol == "https"
	}) {
		t.Errorf("Service ports %+v lack metrics 8443 (https)", svc.Spec.Ports)
	}
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--metrics-cert-dir") }) || volumeOf(d.Spec.Template.Spec, "metrics-certs") != nil {
		t.Errorf("a metrics certificate without controller.metricsCertSecret: args %v", c.Args)
	}

	withCert := render(t, "controller.metricsCertSecret=gpudra-metrics-tls")
	d, c = controllerOf(t, withCert)
	if v := volumeOf(d.Spec.Template.Spec, "metrics-certs"); v == nil || v.Secret == nil || v.Secret.SecretName != "gpudra-metrics-tls" {
		t.Errorf("metrics certificate volume %+v, want Secret gpudra-metrics-tls", v)
	}
	if !slices.Contains(c.Args, "--metrics-cert-dir=/metrics-certs") || !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "metrics-certs" && m.MountPath == "/metrics-certs" && m.ReadOnly
	}) {
		t.Errorf("args %v, mounts %+v: want the certificate read-only at /metrics-certs", c.Args, c.VolumeMounts)
	}

	_, c = controllerOf(t, render(t, valueSets["plain metrics"]...))
	if !slices.Contains(c.Args, "--metrics-bind-address=:8080") || slices.Contains(c.Args, "--metrics-secure") {
		t.Errorf("controller.metricsSecure=false: args %v", c.Args)
	}
	if out, err := template(t, append(slices.Clone(valueSets["plain metrics"]), "controller.metricsCertSecret=tls")); err == nil ||
		!strings.Contains(out, "controller.metricsCertSecret needs controller.metricsSecure=true") {
		t.Errorf("a metrics certificate for plain metrics: err %v, output should say it needs controller.metricsSecure:\n%s", err, out)
	}
}

// TestWebhookCertificates: by default the chart creates the empty Secret the controller keeps
// the certificate in and mounts it read-only; selfSigned writes one into memory at start; a
// certificate Secret of the user's is mounted as it is.
func TestWebhookCertificates(t *testing.T) {
	m := render(t)
	d, c := controllerOf(t, m)
	sec, ok := m.getIn("Secret", namespace, "gpudra-webhook-cert").(*corev1.Secret)
	if !ok || len(sec.Data) != 0 || sec.Type != corev1.SecretTypeOpaque {
		t.Fatalf("Secret gpudra-webhook-cert = %+v, want an empty Opaque Secret for the controller to fill", sec)
	}
	if v := volumeOf(d.Spec.Template.Spec, "certs"); v == nil || v.Secret == nil || v.Secret.SecretName != "gpudra-webhook-cert" {
		t.Errorf("certs volume %+v, want Secret gpudra-webhook-cert", v)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "certs" && m.MountPath == "/certs" && m.ReadOnly }) {
		t.Errorf("mounts %+v, want the Secret read-only at /certs (the --webhook-cert-dir)", c.VolumeMounts)
	}
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--webhook-self-signed") }) {
		t.Errorf("args %v: both certificate sources", c.Args)
	}

	self := render(t, selfSignedValues...)
	d, c = controllerOf(t, self)
	if !slices.Contains(c.Args, "--webhook-self-signed=gpudra-controller,gpudra-controller.gpudra,gpudra-controller.gpudra.svc,127.0.0.1,localhost") {
		t.Errorf("selfSigned: args %v", c.Args)
	}
	if v := volumeOf(d.Spec.Template.Spec, "certs"); v == nil || v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory {
		t.Errorf("selfSigned: certs volume %+v, want a memory emptyDir", v)
	}
	if self.get("Secret", "gpudra-webhook-cert") != nil || slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--webhook-cert-secret") }) {
		t.Error("selfSigned renders the rotated certificate's Secret or flags")
	}

	own := render(t, valueSets["own webhook"]...)
	d, c = controllerOf(t, own)
	if v := volumeOf(d.Spec.Template.Spec, "certs"); v == nil || v.Secret == nil || v.Secret.SecretName != "gpudra-webhook-tls" {
		t.Errorf("certSecret: certs volume %+v, want Secret gpudra-webhook-tls", v)
	}
	if own.get("Secret", "gpudra-webhook-cert") != nil || slices.ContainsFunc(c.Args, func(a string) bool {
		return strings.HasPrefix(a, "--webhook-cert-secret") || strings.HasPrefix(a, "--webhook-self-signed")
	}) {
		t.Errorf("certSecret: args %v, want the mounted certificate only", c.Args)
	}
}

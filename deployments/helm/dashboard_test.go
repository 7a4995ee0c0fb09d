package helm_test

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// allows is whether the ClusterRole's rules grant verb on resource of group.
func allows(r *rbacv1.ClusterRole, group, resource, verb string) bool {
	for _, rule := range r.Rules {
		if slices.Contains(rule.APIGroups, group) && slices.Contains(rule.Resources, resource) && slices.Contains(rule.Verbs, verb) {
			return true
		}
	}
	return false
}

// controller.dashboardPort serves the web view from gpudra-controller: the flag, the container
// and Service ports, and what the controller then reads and checks callers with. Off by
// default, and then the controller may not read the queues.
func TestControllerDashboardIsOptIn(t *testing.T) {
	for _, tc := range []struct {
		name string
		sets []string
		on   bool
		cert bool
	}{
		{"default", nil, false, false},
		{"on", []string{"featureGates.WebView=true", "controller.dashboardPort=8444"}, true, false},
		{"on with a certificate and plain metrics", []string{"featureGates.WebView=true", "controller.dashboardPort=8444", "controller.dashboardCertSecret=dashboard-tls", "controller.metricsSecure=false"}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := render(t, tc.sets...)
			dep := m.get("Deployment", "gpudra-controller").(*appsv1.Deployment)
			c := dep.Spec.Template.Spec.Containers[0]
			hasArg := slices.Contains(c.Args, "--dashboard-bind-address=:8444")
			hasPort := slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "dashboard" && p.ContainerPort == 8444 })
			svc := m.get("Service", "gpudra-controller").(*corev1.Service)
			hasSvc := slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool {
				return p.Name == "dashboard" && p.Port == 8444 && p.AppProtocol != nil && *p.AppProtocol == "https"
			})
			if hasArg != tc.on || hasPort != tc.on || hasSvc != tc.on {
				t.Errorf("flag %v, container port %v, Service port (https) %v; want all %v (args %v)", hasArg, hasPort, hasSvc, tc.on, c.Args)
			}
			role := m.get("ClusterRole", "gpudra-controller").(*rbacv1.ClusterRole)
			for _, q := range []string{"clusterqueues", "cohorts", "localqueues"} {
				if got := allows(role, "kueue.x-k8s.io", q, "watch"); got != tc.on {
					t.Errorf("the controller may watch %s: %v, want %v", q, got, tc.on)
				}
			}
			if tc.on && (!allows(role, "authentication.k8s.io", "tokenreviews", "create") || !allows(role, "authorization.k8s.io", "subjectaccessreviews", "create")) {
				t.Error("the dashboard is on but the controller may not check its callers' tokens and permissions")
			}
			certArg := slices.Contains(c.Args, "--dashboard-cert-dir=/dashboard-certs")
			mounted := slices.ContainsFunc(c.VolumeMounts, func(v corev1.VolumeMount) bool { return v.MountPath == "/dashboard-certs" && v.ReadOnly })
			secret := slices.ContainsFunc(dep.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
				return v.Secret != nil && v.Secret.SecretName == "dashboard-tls"
			})
			if certArg != tc.cert || mounted != tc.cert || secret != tc.cert {
				t.Errorf("certificate: flag %v, read-only mount %v, Secret volume %v; want all %v", certArg, mounted, secret, tc.cert)
			}
			viewer := m.get("ClusterRole", "gpudra-viewer").(*rbacv1.ClusterRole)
			if !slices.ContainsFunc(viewer.Rules, func(r rbacv1.PolicyRule) bool {
				return slices.Contains(r.NonResourceURLs, "/dashboard/*") && slices.Contains(r.Verbs, "get")
			}) {
				t.Error("ClusterRole gpudra-viewer does not let its users get /dashboard/*")
			}
		})
	}
}

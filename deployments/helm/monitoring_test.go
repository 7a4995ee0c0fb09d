package helm_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The Prometheus Operator's monitoring.coreos.com/v1 ServiceMonitor and PodMonitor, the
// fields of github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1 the
// chart may set, with the same JSON names: decoded strictly, a misspelt field fails.
type (
	serviceMonitor struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata"`
		Spec              struct {
			JobLabel          string               `json:"jobLabel,omitempty"`
			TargetLabels      []string             `json:"targetLabels,omitempty"`
			PodTargetLabels   []string             `json:"podTargetLabels,omitempty"`
			Endpoints         []monitorEndpoint    `json:"endpoints"`
			Selector          metav1.LabelSelector `json:"selector"`
			NamespaceSelector namespaceSelector    `json:"namespaceSelector,omitempty"`
		} `json:"spec"`
	}
	podMonitor struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata"`
		Spec              struct {
			JobLabel            string               `json:"jobLabel,omitempty"`
			PodTargetLabels     []string             `json:"podTargetLabels,omitempty"`
			PodMetricsEndpoints []monitorEndpoint    `json:"podMetricsEndpoints"`
			Selector            metav1.LabelSelector `json:"selector"`
			NamespaceSelector   namespaceSelector    `json:"namespaceSelector,omitempty"`
		} `json:"spec"`
	}
	namespaceSelector struct {
		Any        bool     `json:"any,omitempty"`
		MatchNames []string `json:"matchNames,omitempty"`
	}
	// monitorEndpoint is a ServiceMonitor's Endpoint or a PodMonitor's PodMetricsEndpoint
	// (bearerTokenFile is the ServiceMonitor's only).
	monitorEndpoint struct {
		Port              string                    `json:"port,omitempty"`
		TargetPort        *intstr.IntOrString       `json:"targetPort,omitempty"`
		Path              string                    `json:"path,omitempty"`
		Scheme            string                    `json:"scheme,omitempty"`
		Params            map[string][]string       `json:"params,omitempty"`
		Interval          string                    `json:"interval,omitempty"`
		ScrapeTimeout     string                    `json:"scrapeTimeout,omitempty"`
		TLSConfig         *monitorTLS               `json:"tlsConfig,omitempty"`
		BearerTokenFile   string                    `json:"bearerTokenFile,omitempty"`
		BearerTokenSecret *corev1.SecretKeySelector `json:"bearerTokenSecret,omitempty"`
		Authorization     *struct {
			Type        string                    `json:"type,omitempty"`
			Credentials *corev1.SecretKeySelector `json:"credentials,omitempty"`
		} `json:"authorization,omitempty"`
		HonorLabels       bool            `json:"honorLabels,omitempty"`
		Relabelings       []relabelConfig `json:"relabelings,omitempty"`
		MetricRelabelings []relabelConfig `json:"metricRelabelings,omitempty"`
	}
	monitorTLS struct {
		CA *struct {
			Secret    *corev1.SecretKeySelector    `json:"secret,omitempty"`
			ConfigMap *corev1.ConfigMapKeySelector `json:"configMap,omitempty"`
		} `json:"ca,omitempty"`
		ServerName         string `json:"serverName,omitempty"`
		InsecureSkipVerify bool   `json:"insecureSkipVerify,omitempty"`
		CAFile             string `json:"caFile,omitempty"`
	}
	relabelConfig struct {
		SourceLabels []string `json:"sourceLabels,omitempty"`
		Separator    *string  `json:"separator,omitempty"`
		TargetLabel  string   `json:"targetLabel,omitempty"`
		Regex        string   `json:"regex,omitempty"`
		Modulus      uint64   `json:"modulus,omitempty"`
		Replacement  *string  `json:"replacement,omitempty"`
		Action       string   `json:"action,omitempty"`
	}
)

// monitoringValues turn on every monitoring object.
var monitoringValues = []string{"metrics.serviceMonitor.enabled=true", "metrics.podMonitor.enabled=true", "metrics.grafanaDashboard.enabled=true",
	`metrics.serviceMonitor.labels={"release":"prometheus"}`, `metrics.podMonitor.labels={"release":"prometheus"}`}

func init() {
	kinds["ServiceMonitor"] = func() any { return &serviceMonitor{} }
	kinds["PodMonitor"] = func() any { return &podMonitor{} }
	// helm lint --strict and every test that renders each value set cover them too.
	valueSets["monitoring"] = monitoringValues
}

func TestMonitoringIsOffByDefault(t *testing.T) {
	m := render(t)
	for _, kind := range []string{"ServiceMonitor", "PodMonitor"} {
		if got := m.names(kind); len(got) > 0 {
			t.Errorf("defaults render %s %v", kind, got)
		}
	}
	for _, o := range []struct{ kind, name string }{
		{"ConfigMap", "gpudra-grafana-dashboard"}, {"ServiceAccount", "gpudra-metrics-scraper"},
		{"Secret", "gpudra-metrics-scraper-token"}, {"ClusterRoleBinding", "gpudra-controller-metrics-reader"},
	} {
		if m.get(o.kind, o.name) != nil {
			t.Errorf("defaults render %s %s", o.kind, o.name)
		}
	}
}

// selects says whether the selector matches the labels.
func selects(t *testing.T, sel metav1.LabelSelector, set map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(&sel)
	if err != nil {
		t.Fatal(err)
	}
	return s.Matches(labels.Set(set))
}

// TestServiceMonitorScrapesTheSecureControllerMetrics: the ServiceMonitor selects the
// controller's Service and its metrics port, over HTTPS with the token of a ServiceAccount
// the chart binds to the ClusterRole that may get /metrics.
func TestServiceMonitorScrapesTheSecureControllerMetrics(t *testing.T) {
	m := render(t, monitoringValues...)
	sm, ok := m.getIn("ServiceMonitor", namespace, "gpudra-controller").(*serviceMonitor)
	if !ok {
		t.Fatalf("no ServiceMonitor gpudra-controller in %s", namespace)
	}
	if sm.Labels["release"] != "prometheus" {
		t.Errorf("ServiceMonitor labels %v lack metrics.serviceMonitor.labels", sm.Labels)
	}
	svc := m.get("Service", "gpudra-controller").(*corev1.Service)
	if !selects(t, sm.Spec.Selector, svc.Labels) || !slices.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{namespace}) {
		t.Errorf("ServiceMonitor selects %v in %v; the controller's Service has labels %v in %s", sm.Spec.Selector, sm.Spec.NamespaceSelector, svc.Labels, namespace)
	}
	for _, o := range m.all("Service") {
		if s := o.(*corev1.Service); s.Name != svc.Name && selects(t, sm.Spec.Selector, s.Labels) {
			t.Errorf("ServiceMonitor also selects Service %s", s.Name)
		}
	}
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("ServiceMonitor endpoints %+v, want one", sm.Spec.Endpoints)
	}
	ep := sm.Spec.Endpoints[0]
	if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool {
		return p.Name == ep.Port && p.AppProtocol != nil && *p.AppProtocol == "https"
	}) {
		t.Errorf("endpoint port %q is not the Service's HTTPS metrics port (%+v)", ep.Port, svc.Spec.Ports)
	}
	if ep.Scheme != "https" || ep.Path != "/metrics" || ep.Interval != "30s" || ep.TLSConfig == nil || !ep.TLSConfig.InsecureSkipVerify {
		t.Errorf("endpoint %+v: want https on /metrics every 30s, skipping verification of the controller's own certificate", ep)
	}
	if ep.Authorization == nil || ep.Authorization.Type != "Bearer" || ep.Authorization.Credentials == nil ||
		ep.Authorization.Credentials.Name != "gpudra-metrics-scraper-token" || ep.Authorization.Credentials.Key != "token" || ep.BearerTokenFile != "" {
		t.Fatalf("endpoint authorization %+v, bearerTokenFile %q: want the bearer token of Secret gpudra-metrics-scraper-token", ep.Authorization, ep.BearerTokenFile)
	}
	sec, ok := m.getIn("Secret", namespace, "gpudra-metrics-scraper-token").(*corev1.Secret)
	if !ok || sec.Type != corev1.SecretTypeServiceAccountToken || sec.Annotations[corev1.ServiceAccountNameKey] != "gpudra-metrics-scraper" {
		t.Fatalf("Secret gpudra-metrics-scraper-token %+v: want a service-account-token Secret of gpudra-metrics-scraper", sec)
	}
	if m.getIn("ServiceAccount", namespace, "gpudra-metrics-scraper") == nil {
		t.Error("no ServiceAccount gpudra-metrics-scraper")
	}
	crb, ok := m.get("ClusterRoleBinding", "gpudra-controller-metrics-reader").(*rbacv1.ClusterRoleBinding)
	if !ok {
		t.Fatal("no ClusterRoleBinding gpudra-controller-metrics-reader")
	}
	want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "gpudra-metrics-scraper", Namespace: namespace}}
	if !slices.Equal(crb.Subjects, want) || crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != "gpudra-controller-metrics-reader" {
		t.Errorf("ClusterRoleBinding %+v -> %+v, want %+v bound to ClusterRole gpudra-controller-metrics-reader", crb.Subjects, crb.RoleRef, want)
	}
	role, ok := m.get("ClusterRole", crb.RoleRef.Name).(*rbacv1.ClusterRole)
	if !ok || len(role.Rules) != 1 || !slices.Equal(role.Rules[0].NonResourceURLs, []string{"/metrics"}) || !slices.Equal(role.Rules[0].Verbs, []string{"get"}) {
		t.Errorf("ClusterRole %s %+v: want get on /metrics only", crb.RoleRef.Name, role)
	}
}

func TestServiceMonitorWithPrometheusToken(t *testing.T) {
	m := render(t, "metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.auth=prometheus",
		"metrics.prometheusServiceAccount.name=prometheus-k8s", "metrics.prometheusServiceAccount.namespace=monitoring")
	ep := m.get("ServiceMonitor", "gpudra-controller").(*serviceMonitor).Spec.Endpoints[0]
	if ep.BearerTokenFile != "/var/run/secrets/kubernetes.io/serviceaccount/token" || ep.Authorization != nil || ep.Scheme != "https" {
		t.Errorf("endpoint %+v: want https with Prometheus' own token (bearerTokenFile)", ep)
	}
	if m.get("ServiceAccount", "gpudra-metrics-scraper") != nil || m.get("Secret", "gpudra-metrics-scraper-token") != nil {
		t.Error("auth=prometheus still renders the scraper's ServiceAccount or token")
	}
	crb, ok := m.get("ClusterRoleBinding", "gpudra-controller-metrics-reader").(*rbacv1.ClusterRoleBinding)
	if want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus-k8s", Namespace: "monitoring"}}; !ok || !slices.Equal(crb.Subjects, want) {
		t.Errorf("ClusterRoleBinding %+v, want subjects %+v", crb, want)
	}
	if render(t, "metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.auth=prometheus").get("ClusterRoleBinding", "gpudra-controller-metrics-reader") != nil {
		t.Error("auth=prometheus without prometheusServiceAccount binds someone")
	}
	if _, err := template(t, []string{"metrics.serviceMonitor.enabled=true", "metrics.prometheusServiceAccount.name=p"}); err == nil {
		t.Error("prometheusServiceAccount.name without its namespace renders")
	}
	out, err := template(t, []string{"metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.auth=basic"})
	if err == nil || !strings.Contains(out, `metrics.serviceMonitor.auth="basic": accepted values are secret, prometheus`) {
		t.Errorf("auth=basic: %v\n%s", err, out)
	}
}

func TestServiceMonitorOfPlainMetrics(t *testing.T) {
	m := render(t, append(slices.Clone(valueSets["plain metrics"]), "metrics.serviceMonitor.enabled=true")...)
	ep := m.get("ServiceMonitor", "gpudra-controller").(*serviceMonitor).Spec.Endpoints[0]
	if ep.Scheme != "http" || ep.Authorization != nil || ep.BearerTokenFile != "" || ep.TLSConfig != nil {
		t.Errorf("endpoint %+v: want plain HTTP without a token", ep)
	}
	if m.get("ServiceAccount", "gpudra-metrics-scraper") != nil || m.get("ClusterRoleBinding", "gpudra-controller-metrics-reader") != nil {
		t.Error("plain metrics still get a scraper identity")
	}
	if got := render(t, "metrics.serviceMonitor.enabled=true", "controller.metricsPort=0").names("ServiceMonitor"); len(got) > 0 {
		t.Errorf("controller.metricsPort=0 renders ServiceMonitor %v", got)
	}
}

// TestPodMonitorsScrapeEachPluginDaemonSet: one PodMonitor per DaemonSet selecting its pods:
// by their metrics port, or in the host's network (no declared port) at the pod's address
// and the pool's port; every target labelled with its node. Pools Prometheus cannot reach
// get none.
func TestPodMonitorsScrapeEachPluginDaemonSet(t *testing.T) {
	m := render(t, "metrics.podMonitor.enabled=true", "metrics.podMonitor.interval=15s",
		`kubeletPlugin.pools=[{"name":"edge","hostNetwork":true,"metricsPort":39400},{"name":"quiet","metricsPort":0},{"name":"local","metricsHost":"127.0.0.1"}]`)
	if got, want := m.names("PodMonitor"), []string{"gpudra-kubelet-plugin", "gpudra-kubelet-plugin-edge"}; !slices.Equal(got, want) {
		t.Fatalf("PodMonitors %v, want %v", got, want)
	}
	for _, name := range []string{"gpudra-kubelet-plugin", "gpudra-kubelet-plugin-edge"} {
		pm := m.getIn("PodMonitor", namespace, name).(*podMonitor)
		for _, o := range m.all("DaemonSet") {
			ds := o.(*appsv1.DaemonSet)
			if got := selects(t, pm.Spec.Selector, ds.Spec.Template.Labels); got != (ds.Name == name) {
				t.Errorf("PodMonitor %s selects DaemonSet %s's pods: %v", name, ds.Name, got)
			}
		}
		ds := m.get("DaemonSet", name).(*appsv1.DaemonSet)
		if len(pm.Spec.PodMetricsEndpoints) != 1 {
			t.Fatalf("PodMonitor %s endpoints %+v, want one", name, pm.Spec.PodMetricsEndpoints)
		}
		ep := pm.Spec.PodMetricsEndpoints[0]
		// The plugins' metrics name every claim: HTTPS, with the scraper's token.
		if ep.Scheme != "https" || ep.Path != "/metrics" || ep.Interval != "15s" || ep.Authorization == nil || ep.TLSConfig == nil {
			t.Errorf("PodMonitor %s endpoint %+v: want https on /metrics every 15s, with a token and a TLS config", name, ep)
		}
		if !slices.ContainsFunc(ep.Relabelings, func(r relabelConfig) bool {
			return slices.Equal(r.SourceLabels, []string{"__meta_kubernetes_pod_node_name"}) && r.TargetLabel == "node"
		}) {
			t.Errorf("PodMonitor %s relabelings %+v do not set label node", name, ep.Relabelings)
		}
		ports := ds.Spec.Template.Spec.Containers[0].Ports
		if ds.Spec.Template.Spec.HostNetwork {
			if ep.Port != "" || len(ports) > 0 {
				t.Errorf("PodMonitor %s port %q, pod ports %+v: in the host's network neither names a port", name, ep.Port, ports)
			}
			if !slices.ContainsFunc(ep.Relabelings, func(r relabelConfig) bool {
				return r.TargetLabel == "__address__" && r.Replacement != nil && *r.Replacement == "${1}:39400"
			}) {
				t.Errorf("PodMonitor %s relabelings %+v do not target the pod's address on port 39400", name, ep.Relabelings)
			}
		} else if !slices.ContainsFunc(ports, func(p corev1.ContainerPort) bool { return p.Name == ep.Port }) || ep.Port != "metrics" {
			t.Errorf("PodMonitor %s port %q is not the plugin container's metrics port (%+v)", name, ep.Port, ports)
		}
	}
}

// TestGrafanaDashboardConfigMap: the dashboard ConfigMap carries the sidecar's label and the
// chart's dashboard JSON as it is in dashboards/gpudra.json.
func TestGrafanaDashboardConfigMap(t *testing.T) {
	want, err := os.ReadFile(filepath.Join(chartDir, "dashboards", "gpudra.json"))
	if err != nil {
		t.Fatal(err)
	}
	m := render(t, "metrics.grafanaDashboard.enabled=true", "metrics.grafanaDashboard.namespace=monitoring",
		`metrics.grafanaDashboard.annotations={"grafana_folder":"GPUs"}`)
	cm, ok := m.getIn("ConfigMap", "monitoring", "gpudra-grafana-dashboard").(*corev1.ConfigMap)
	if !ok {
		t.Fatal("no ConfigMap gpudra-grafana-dashboard in namespace monitoring")
	}
	if cm.Labels["grafana_dashboard"] != "1" || cm.Annotations["grafana_folder"] != "GPUs" {
		t.Errorf("ConfigMap labels %v, annotations %v: want grafana_dashboard=1 and the folder annotation", cm.Labels, cm.Annotations)
	}
	got := cm.Data["gpudra.json"]
	if strings.TrimSpace(got) != strings.TrimSpace(string(want)) {
		t.Errorf("ConfigMap gpudra.json (%d bytes) is not dashboards/gpudra.json (%d bytes)", len(got), len(want))
	}
	var d struct {
		UID    string            `json:"uid"`
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal([]byte(got), &d); err != nil || d.UID != "gpudra" || len(d.Panels) == 0 {
		t.Errorf("ConfigMap gpudra.json: %v, uid %q, %d panels", err, d.UID, len(d.Panels))
	}
}

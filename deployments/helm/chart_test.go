package helm_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/apimachinery/pkg/util/validation/field"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/internal/helmchart"
	"github.com/gpudra/gpudra/queueing/network"
)

// valueSets are the combinations `helm lint` must accept and every test renders.
var valueSets = map[string][]string{
	"defaults":      nil,
	"no webhook":    {"webhook.enabled=false"},
	"kueue":         {"kueue.admissionCheck=true", "kueue.samples=true", "featureGates.JobDependencies=true", "featureGates.LargeJobsFirst=true", "featureGates.DataPrewarm=true"},
	"lab":           labValues,
	"own webhook":   {"webhook.certSecret=gpudra-webhook-tls", "webhook.caBundle=Q0EK", "webhook.url=https://127.0.0.1:9443/validate-gpudra-config"},
	"self-signed":   selfSignedValues,
	"plain metrics": {"controller.metricsSecure=false", "controller.metricsPort=8080"},
	"real node":     realNodeValues,
	"hami topology": {"featureGates.HAMiCoreEnforcement=true", "kubeletPlugin.vgpuLibrary=/usr/local/vgpu/libvgpu.so", `deviceClasses.share.config={"apiVersion":"gpu.gpudra.dev/v1alpha1","kind":"GpuConfig","limits":{"enforcement":"Auto"}}`,
		`topology.blocks=[{"name":"b1","racks":[{"name":"r1","tor":"t1","nodes":["n1","n2"]}]}]`,
		`kueue.topologyFlavorNodeLabels={"nvidia.com/gpu.present":"true"}`},
	"tuned controller": {"controller.kubeAPIQPS=50", "controller.kubeAPIBurst=100", "controller.admissionCheckWorkers=32"},
	"scheduler":        {"scheduler.enabled=true", "scheduler.replicas=2"},
}

// realNodeValues adds what a lab's real node (a kubelet without kube-proxy) gets: a pool in
// the host's network with the node's own host directories, reaching the API server directly.
var realNodeValues = append(slices.Clone(labValues),
	`kubeletPlugin.pools[2]={"name":"r1-real","nvml":"sim:dgx-h100","hostNetwork":true,"metricsPort":39400,"pluginDataDir":"/lab/r1/plugin","kubeletRegistryDir":"/lab/r1/kubelet/plugins_registry","cdiRoot":"/lab/r1/cdi","driverRoot":"/lab/r1/driver-root","nodeSelector":{"kubernetes.io/hostname":"r1-real"},"tolerations":[{"key":"lab.gpudra.dev/real-node","operator":"Exists"}]}`,
	"kubernetesService.host=127.0.0.1", "kubernetesService.port=6443")

// selfSignedValues are the controller's values in the lab (lab/chart.go): one replica
// outside the cluster, its webhook at a 127.0.0.1 URL with a certificate made at start.
var selfSignedValues = []string{"webhook.certManagement=selfSigned", "controller.replicas=1",
	"webhook.url=https://127.0.0.1:9443/validate-gpudra-config", `webhook.extraCertNames=["127.0.0.1","localhost"]`}

// labValues is what a lab of simulated nodes passes: one DaemonSet per simulated profile,
// selected by the lab's node label lab.gpudra.dev/profile, and dynamic MIG turned on.
var labValues = []string{
	"featureGates.DynamicMIG=true",
	"kubeletPlugin.defaultPool=false",
	"kubeletPlugin.privileged=false",
	"kubeletPlugin.driverRoot=/tmp/gpudra-lab/driver-root",
	`kubeletPlugin.pools=[{"name":"dgx-h100","nvml":"sim:dgx-h100","mig":"dynamic","nodeSelector":{"lab.gpudra.dev/profile":"dgx-h100"}},{"name":"dgx-v100","nvml":"sim:dgx-v100","nodeSelector":{"lab.gpudra.dev/profile":"dgx-v100"}}]`,
	"kueue.admissionCheck=true",
}

func TestChartLints(t *testing.T) {
	for name, sets := range valueSets {
		t.Run(name, func(t *testing.T) {
			vals, err := helmchart.SetArgs(sets).Merge()
			if err != nil {
				t.Fatal(err)
			}
			kv, err := common.ParseKubeVersion(kubeVersion)
			if err != nil {
				t.Fatal(err)
			}
			// helm lint --strict: warnings count as errors.
			var errs []error
			for _, m := range lint.RunAll(chartDir, vals, namespace, lint.WithKubeVersion(kv)).Messages {
				if m.Severity >= support.WarningSev {
					errs = append(errs, m.Err)
				}
			}
			if err := errors.Join(errs...); err != nil {
				t.Errorf("helm lint --strict with %v: %v", sets, err)
			}
		})
	}
}

// TestKubeletPluginDaemonSet proves the plugin gets the host paths, identity and flags the
// kubelet, the container runtime and the admission policy rely on.
func TestKubeletPluginDaemonSet(t *testing.T) {
	ds := render(t).get("DaemonSet", "gpudra-kubelet-plugin").(*appsv1.DaemonSet)
	spec := ds.Spec.Template.Spec
	if spec.ServiceAccountName != "gpudra-kubelet-plugin" {
		t.Errorf("serviceAccountName = %q, want gpudra-kubelet-plugin", spec.ServiceAccountName)
	}
	c := spec.Containers[0]
	hostPaths := hostPathsOf(spec)
	for _, want := range []struct{ host, mount string }{
		{"/var/lib/kubelet/plugins/gpu.gpudra.dev", "/var/lib/kubelet/plugins/gpu.gpudra.dev"},
		{"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins_registry"},
		{"/var/run/cdi", "/var/run/cdi"},
		{"/", "/driver-root"},
	} {
		m := mountOf(c, hostPaths, want.host)
		if m == nil {
			t.Errorf("host path %s is not mounted (host paths: %v)", want.host, hostPaths)
			continue
		}
		if m.MountPath != want.mount {
			t.Errorf("host path %s mounted at %s, want %s", want.host, m.MountPath, want.mount)
		}
		if readOnly := want.host == "/"; m.ReadOnly != readOnly {
			t.Errorf("host path %s: readOnly = %v, want %v", want.host, m.ReadOnly, readOnly)
		}
	}
	if env := envOf(c, "NODE_NAME"); env == nil || env.ValueFrom == nil || env.ValueFrom.FieldRef == nil || env.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("NODE_NAME = %+v, want it from fieldRef spec.nodeName", env)
	}
	for _, arg := range []string{"--nvml=nvml", "--mig=static", "--driver-root=/", "--cdi-root=/var/run/cdi",
		"--plugin-data-dir=/var/lib/kubelet/plugins/gpu.gpudra.dev", "--registrar-dir=/var/lib/kubelet/plugins_registry"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("args %v lack %s", c.Args, arg)
		}
	}
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--vgpu-library") }) {
		t.Errorf("args %v: --vgpu-library without kubeletPlugin.vgpuLibrary", c.Args)
	}
	// The driver's MPS and time-slice tools are run from the driver root as the container sees it.
	for _, arg := range []string{"--mps-control-daemon=/driver-root/usr/bin/nvidia-cuda-mps-control", "--nvidia-smi=/driver-root/usr/bin/nvidia-smi"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("args %v lack %s", c.Args, arg)
		}
	}
	// MPS claims' daemons run in pods of their own, of the plugin's image, in its namespace.
	for _, arg := range []string{"--mps-control-daemons=pod", "--mps-daemon-image=" + c.Image, "--mps-daemon-image-pull-policy=IfNotPresent", "--mps-daemon-priority-class=system-node-critical"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("args %v lack %s", c.Args, arg)
		}
	}
	// Pulled as the plugin's image is.
	secret := render(t, `imagePullSecrets=[{"name":"regcred"},{"name":"mirror"}]`).get("DaemonSet", "gpudra-kubelet-plugin").(*appsv1.DaemonSet).Spec.Template.Spec.Containers[0]
	if !slices.Contains(secret.Args, "--mps-daemon-image-pull-secrets=regcred,mirror") {
		t.Errorf("with imagePullSecrets: args %v lack --mps-daemon-image-pull-secrets=regcred,mirror", secret.Args)
	}
	if env := envOf(c, "POD_NAMESPACE"); env == nil || env.ValueFrom == nil || env.ValueFrom.FieldRef == nil || env.ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("POD_NAMESPACE = %+v, want it from fieldRef metadata.namespace (where the MPS daemon pods go)", env)
	}
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	if ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 1 || ru.MaxUnavailable.IntValue() != 0 {
		t.Errorf("rollingUpdate = %+v, want maxSurge 1 and maxUnavailable 0 (the new plugin starts beside the old one)", ru)
	}
	if env := envOf(c, "POD_UID"); env == nil || env.ValueFrom == nil || env.ValueFrom.FieldRef == nil || env.ValueFrom.FieldRef.FieldPath != "metadata.uid" {
		t.Errorf("POD_UID = %+v, want it from fieldRef metadata.uid (rolling updates need the pod UID)", env)
	}
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Errorf("the plugin with real NVML must be privileged (MIG, all /dev/nvidia*): %+v", c.SecurityContext)
	}
	// The MPS claims' shm tmpfs the plugin mounts under its data directory reaches the host.
	if m := mountOf(c, hostPathsOf(spec), "/var/lib/kubelet/plugins/gpu.gpudra.dev"); m == nil || m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationBidirectional {
		t.Errorf("plugin data mount %+v, want Bidirectional propagation for a privileged plugin", m)
	}
	if spec.NodeSelector["nvidia.com/gpu.present"] != "true" {
		t.Errorf("nodeSelector = %v, want nvidia.com/gpu.present=true", spec.NodeSelector)
	}
}

// TestKubeletPluginProbes proves the plugin's probes ask its metrics server for /readyz and
// /livez where the kubelet can reach it, and are left out where it cannot.
func TestKubeletPluginProbes(t *testing.T) {
	tests := []struct {
		name string
		sets []string
		// host is the probes' host ("": the pod's IP); none: no probes.
		host string
		none bool
	}{
		{"defaults: the pod's IP", nil, "", false},
		{"metrics off", []string{"kubeletPlugin.metricsPort=0"}, "", true},
		{"metrics on the pod's loopback only", []string{"kubeletPlugin.metricsHost=127.0.0.1"}, "", true},
		{"host network on the node's address", []string{"kubeletPlugin.hostNetwork=true"}, "", false},
		{"host network on the node's loopback", []string{"kubeletPlugin.hostNetwork=true", "kubeletPlugin.metricsHost=127.0.0.1"}, "127.0.0.1", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := render(t, tc.sets...).get("DaemonSet", "gpudra-kubelet-plugin").(*appsv1.DaemonSet).Spec.Template.Spec.Containers[0]
			probes := map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe}
			want := map[string]string{"startup": "/livez", "readiness": "/readyz", "liveness": "/livez"}
			for kind, p := range probes {
				if tc.none {
					if p != nil {
						t.Errorf("%s probe %+v where the kubelet cannot reach the metrics server", kind, p)
					}
					continue
				}
				if p == nil || p.HTTPGet == nil {
					t.Errorf("no HTTP %s probe", kind)
					continue
				}
				if g := p.HTTPGet; g.Path != want[kind] || g.Port.IntValue() != 9400 || g.Host != tc.host {
					t.Errorf("%s probe GETs %s:%s%s, want %q:9400%s", kind, g.Host, g.Port.String(), g.Path, tc.host, want[kind])
				}
			}
			if p := c.StartupProbe; p != nil && int(p.PeriodSeconds)*int(p.FailureThreshold) < 300 {
				t.Errorf("start-up probe gives the plugin %ds, want at least 5 minutes to discover and recover", int(p.PeriodSeconds)*int(p.FailureThreshold))
			}
		})
	}
}

// TestLabPoolsRunSimulatedProfiles proves one DaemonSet per pool with its own profile and
// node selector, unprivileged, and no default DaemonSet.
func TestLabPoolsRunSimulatedProfiles(t *testing.T) {
	m := render(t, labValues...)
	if got := m.names("DaemonSet"); !slices.Equal(got, []string{"gpudra-kubelet-plugin-dgx-h100", "gpudra-kubelet-plugin-dgx-v100"}) {
		t.Fatalf("DaemonSets = %v, want one per pool", got)
	}
	for _, want := range []struct{ name, nvml, mig, profile string }{
		{"gpudra-kubelet-plugin-dgx-h100", "sim:dgx-h100", "dynamic", "dgx-h100"},
		{"gpudra-kubelet-plugin-dgx-v100", "sim:dgx-v100", "static", "dgx-v100"},
	} {
		ds := m.get("DaemonSet", want.name).(*appsv1.DaemonSet)
		c := ds.Spec.Template.Spec.Containers[0]
		for _, arg := range []string{"--nvml=" + want.nvml, "--mig=" + want.mig, "--driver-root=/tmp/gpudra-lab/driver-root"} {
			if !slices.Contains(c.Args, arg) {
				t.Errorf("%s: args %v lack %s", want.name, c.Args, arg)
			}
		}
		if slices.ContainsFunc(c.Args, func(a string) bool {
			return strings.HasPrefix(a, "--mps-control-daemon=") || strings.HasPrefix(a, "--nvidia-smi")
		}) {
			t.Errorf("%s: args %v: a simulated pool simulates MPS daemons and time-slices, it gets no driver tools", want.name, c.Args)
		}
		if got := ds.Spec.Template.Spec.NodeSelector; len(got) != 1 || got["lab.gpudra.dev/profile"] != want.profile {
			t.Errorf("%s: nodeSelector = %v", want.name, got)
		}
		if sc := c.SecurityContext; sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: a simulated plugin runs unprivileged: %+v", want.name, sc)
		}
		if sel, tmpl := ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels; sel["gpudra.dev/pool"] != tmpl["gpudra.dev/pool"] || sel["gpudra.dev/pool"] != want.profile {
			t.Errorf("%s: selector %v must select only its pool's pods %v", want.name, sel, tmpl)
		}
	}
}

// TestPoolOverridesHostNetworkAndDirs: a pool's own values (host network, host directories,
// metrics port) change only that pool's DaemonSet, and kubernetesService reaches every pod.
func TestPoolOverridesHostNetworkAndDirs(t *testing.T) {
	m := render(t, realNodeValues...)
	ds := m.get("DaemonSet", "gpudra-kubelet-plugin-r1-real").(*appsv1.DaemonSet)
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("hostNetwork %v, dnsPolicy %q: want the node's network with cluster DNS", spec.HostNetwork, spec.DNSPolicy)
	}
	for _, arg := range []string{"--plugin-data-dir=/lab/r1/plugin", "--registrar-dir=/lab/r1/kubelet/plugins_registry",
		"--cdi-root=/lab/r1/cdi", "--driver-root=/lab/r1/driver-root", "--metrics-bind-address=$(HOST_IP):39400"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("args %v lack %s", c.Args, arg)
		}
	}
	if env := envOf(c, "HOST_IP"); env == nil || env.ValueFrom == nil || env.ValueFrom.FieldRef == nil || env.ValueFrom.FieldRef.FieldPath != "status.hostIP" {
		t.Errorf("HOST_IP = %+v, want fieldRef status.hostIP (metrics on the node's address only)", env)
	}
	paths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			paths[v.Name] = v.HostPath.Path
		}
	}
	for vol, want := range map[string]string{"plugin-data": "/lab/r1/plugin", "plugins-registry": "/lab/r1/kubelet/plugins_registry", "cdi": "/lab/r1/cdi", "driver-root": "/lab/r1/driver-root"} {
		if paths[vol] != want {
			t.Errorf("volume %s = host path %q, want %q", vol, paths[vol], want)
		}
	}
	if len(spec.Tolerations) != 1 || spec.Tolerations[0].Key != "lab.gpudra.dev/real-node" || spec.NodeSelector["kubernetes.io/hostname"] != "r1-real" || len(spec.NodeSelector) != 1 {
		t.Errorf("tolerations %v, nodeSelector %v: want the pool's own, whole", spec.Tolerations, spec.NodeSelector)
	}
	other := m.get("DaemonSet", "gpudra-kubelet-plugin-dgx-h100").(*appsv1.DaemonSet)
	oc := other.Spec.Template.Spec.Containers[0]
	if other.Spec.Template.Spec.HostNetwork || !slices.Contains(oc.Args, "--metrics-bind-address=:9400") || !slices.Contains(oc.Args, "--plugin-data-dir=/var/lib/kubelet/plugins/gpu.gpudra.dev") {
		t.Errorf("another pool took the real node's values: hostNetwork %v, args %v", other.Spec.Template.Spec.HostNetwork, oc.Args)
	}
	ctrl := m.get("Deployment", "gpudra-controller").(*appsv1.Deployment).Spec.Template.Spec.Containers[0]
	for _, c := range []corev1.Container{c, oc, ctrl} {
		if h, p := envOf(c, "KUBERNETES_SERVICE_HOST"), envOf(c, "KUBERNETES_SERVICE_PORT"); h == nil || h.Value != "127.0.0.1" || p == nil || p.Value != "6443" {
			t.Errorf("container %s: KUBERNETES_SERVICE_HOST %+v, PORT %+v, want kubernetesService's 127.0.0.1:6443", c.Name, h, p)
		}
	}
	lab := render(t, append(slices.Clone(realNodeValues), `kubeletPlugin.pools[2].metricsHost=127.0.0.1`)...)
	lc := lab.get("DaemonSet", "gpudra-kubelet-plugin-r1-real").(*appsv1.DaemonSet).Spec.Template.Spec.Containers[0]
	if !slices.Contains(lc.Args, "--metrics-bind-address=127.0.0.1:39400") || envOf(lc, "HOST_IP") != nil {
		t.Errorf("with metricsHost the metrics listen there, without HOST_IP: args %v", lc.Args)
	}
	// A pool's false and 0 replace the defaults too (privileged true, metrics on 9400).
	plain := render(t, `kubeletPlugin.pools=[{"name":"quiet","privileged":false,"metricsPort":0,"nodeSelector":{"pool":"quiet"}}]`)
	qc := plain.get("DaemonSet", "gpudra-kubelet-plugin-quiet").(*appsv1.DaemonSet).Spec.Template.Spec.Containers[0]
	if sc := qc.SecurityContext; sc == nil || sc.Privileged == nil || *sc.Privileged || slices.ContainsFunc(qc.Args, func(a string) bool { return strings.HasPrefix(a, "--metrics-bind-address") }) {
		t.Errorf("pool with privileged false and metricsPort 0: securityContext %+v, args %v", qc.SecurityContext, qc.Args)
	}
	for _, m := range qc.VolumeMounts {
		if m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional {
			t.Errorf("unprivileged pool: %s has Bidirectional propagation (refused by the API server)", m.Name)
		}
	}
	if dc := plain.get("DaemonSet", "gpudra-kubelet-plugin").(*appsv1.DaemonSet).Spec.Template.Spec.Containers[0]; dc.SecurityContext == nil || !*dc.SecurityContext.Privileged {
		t.Errorf("the default DaemonSet lost its privileges to a pool's value: %+v", dc.SecurityContext)
	}
	if env := envOf(render(t).get("Deployment", "gpudra-controller").(*appsv1.Deployment).Spec.Template.Spec.Containers[0], "KUBERNETES_SERVICE_HOST"); env != nil {
		t.Errorf("by default the pods keep the cluster's Service address, got %+v", env)
	}
}

// TestPoolPublishes: a training pool's plugin publishes fewer devices and reads no MIG
// layouts; the default pool publishes everything.
func TestPoolPublishes(t *testing.T) {
	m := render(t, `kubeletPlugin.pools=[{"name":"training","publish":"training","nodeSelector":{"gpudra.dev/node-pool":"training"}}]`)
	pool := m.get("DaemonSet", "gpudra-kubelet-plugin-training").(*appsv1.DaemonSet).Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(pool, "--publish=training") || slices.ContainsFunc(pool, func(a string) bool { return strings.HasPrefix(a, "--mig-layouts") }) {
		t.Errorf("training pool args %v: want --publish=training and no --mig-layouts", pool)
	}
	def := m.get("DaemonSet", "gpudra-kubelet-plugin").(*appsv1.DaemonSet).Spec.Template.Spec.Containers[0].Args
	if slices.ContainsFunc(def, func(a string) bool { return strings.HasPrefix(a, "--publish") }) || !slices.Contains(def, "--mig-layouts=/etc/gpudra/mig-layouts.yaml") {
		t.Errorf("default pool args %v: want every device published and the MIG layouts", def)
	}
}

// TestControllerIsUnprivileged proves the controller runs non-root, read-only, without
// privilege escalation, and serves the webhook on the Service's port 9443.
func TestControllerIsUnprivileged(t *testing.T) {
	m := render(t)
	d := m.get("Deployment", "gpudra-controller").(*appsv1.Deployment)
	pod, c := d.Spec.Template.Spec, d.Spec.Template.Spec.Containers[0]
	if pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
		t.Error("controller: runAsNonRoot is not set")
	}
	sc := c.SecurityContext
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Privileged != nil && *sc.Privileged {
		t.Errorf("controller securityContext = %+v", sc)
	}
	for _, arg := range []string{"--webhook-port=9443", "--webhook-cert-dir=/certs",
		"--webhook-cert-secret=gpudra/gpudra-webhook-cert", "--webhook-cert-dns-names=gpudra-controller.gpudra.svc,gpudra-controller.gpudra,gpudra-controller"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("controller args %v lack %s", c.Args, arg)
		}
	}
	svc := m.get("Service", "gpudra-controller").(*corev1.Service)
	if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == 9443 && p.TargetPort.StrVal == "webhook" }) {
		t.Errorf("Service ports %+v lack 9443 → webhook", svc.Spec.Ports)
	}
	vwc := m.get("ValidatingWebhookConfiguration", "gpudra-config-validation").(*admissionv1.ValidatingWebhookConfiguration)
	for _, w := range vwc.Webhooks {
		s := w.ClientConfig.Service
		if s == nil || s.Namespace != namespace || s.Name != svc.Name || s.Port == nil || *s.Port != 9443 || s.Path == nil || *s.Path != "/validate-gpudra-config" {
			t.Errorf("webhook %s clientConfig = %+v, want Service %s/%s:9443/validate-gpudra-config", w.Name, w.ClientConfig, namespace, svc.Name)
		}
	}
}

// TestControllerTuningArgs proves the controller's API client rate and admission check
// workers reach its flags only when set: unset, the binary's defaults apply (no client-side
// limit), and numbers a values file holds as floats are written whole.
func TestControllerTuningArgs(t *testing.T) {
	tuning := func(m manifest) []string {
		args := m.get("Deployment", "gpudra-controller").(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Args
		return slices.DeleteFunc(slices.Clone(args), func(a string) bool {
			return !strings.HasPrefix(a, "--kube-api-") && !strings.HasPrefix(a, "--admission-check-workers")
		})
	}
	for _, tc := range []struct {
		name string
		sets []string
		want []string
	}{
		{"defaults", nil, []string{"--admission-check-workers=8"}},
		{"set", valueSets["tuned controller"], []string{"--kube-api-qps=50", "--kube-api-burst=100", "--admission-check-workers=32"}},
		{"fractional qps, zero burst", []string{"controller.kubeAPIQPS=12.5", "controller.kubeAPIBurst=0"}, []string{"--kube-api-qps=12.5", "--kube-api-burst=0", "--admission-check-workers=8"}},
		{"no limit", []string{"controller.kubeAPIQPS=-1"}, []string{"--kube-api-qps=-1", "--admission-check-workers=8"}},
		{"values file numbers", []string{`controller={"kubeAPIQPS":1000000,"kubeAPIBurst":2000000,"admissionCheckWorkers":16}`}, []string{"--kube-api-qps=1000000", "--kube-api-burst=2000000", "--admission-check-workers=16"}},
		{"workers unset", []string{"controller.admissionCheckWorkers=null"}, nil},
	} {
		if got := tuning(render(t, tc.sets...)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: controller args %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRBACIsMinimal proves no role holds a wildcard, secrets, or verbs beyond what the
// components use, and that the admission policy holds plugins to their own node.
func TestRBACIsMinimal(t *testing.T) {
	for name, sets := range valueSets {
		m := render(t, sets...)
		for _, o := range m.all("ClusterRole") {
			r := o.(*rbacv1.ClusterRole)
			for _, rule := range r.Rules {
				for _, s := range slices.Concat(rule.APIGroups, rule.Resources, rule.Verbs) {
					if strings.Contains(s, "*") {
						t.Errorf("%s: ClusterRole %s has a wildcard: %+v", name, r.Name, rule)
					}
				}
				if slices.Contains(rule.Resources, "secrets") {
					t.Errorf("%s: ClusterRole %s may touch secrets: %+v", name, r.Name, rule)
				}
			}
		}
	}
	m := render(t)
	plugin := m.get("ClusterRole", "gpudra-kubelet-plugin").(*rbacv1.ClusterRole)
	want := map[string][]string{
		"resource.k8s.io/resourceclaims":        {"get", "list"},
		"resource.k8s.io/resourceclaims/status": {"update"},
		"resource.k8s.io/resourceclaims/driver": {"associated-node:update"},
		"resource.k8s.io/resourceslices":        {"create", "delete", "list", "update", "watch"},
		"/nodes":                                {"get", "patch"},
		"/events":                               {"create", "patch"},
		"events.k8s.io/events":                  {"create", "patch"},
		// Who may read its /metrics.
		"authentication.k8s.io/tokenreviews":        {"create"},
		"authorization.k8s.io/subjectaccessreviews": {"create"},
	}
	if got := verbsByResource(plugin); !apiequality.Semantic.DeepEqual(got, want) {
		t.Errorf("plugin permissions:\n%s", diff.Diff(want, got))
	}
	// In its own namespace only: its node's MPS control daemons.
	role := m.get("Role", "gpudra-kubelet-plugin").(*rbacv1.Role)
	wantRole := map[string][]string{"apps/deployments": {"create", "delete", "get", "list"}, "/pods": {"list"}}
	if got := verbsByRules(role.Rules); role.Namespace != namespace || !apiequality.Semantic.DeepEqual(got, wantRole) {
		t.Errorf("plugin Role in %q:\n%s", role.Namespace, diff.Diff(wantRole, got))
	}
	daemons := m.get("ValidatingAdmissionPolicy", "gpudra-mps-daemons-own-node").(*admissionv1.ValidatingAdmissionPolicy)
	if rules := daemons.Spec.MatchConstraints.ResourceRules; len(rules) != 1 || !slices.Equal(rules[0].Resources, []string{"deployments"}) {
		t.Errorf("MPS daemon policy matches %+v, want deployments", rules)
	}
	if m.get("ValidatingAdmissionPolicyBinding", "gpudra-mps-daemons-own-node") == nil {
		t.Error("no binding for the MPS daemon policy")
	}
	vap := m.get("ValidatingAdmissionPolicy", "gpudra-resourceslices-own-node").(*admissionv1.ValidatingAdmissionPolicy)
	if len(vap.Spec.MatchConditions) != 1 || !strings.Contains(vap.Spec.MatchConditions[0].Expression, `"system:serviceaccount:gpudra:gpudra-kubelet-plugin"`) {
		t.Errorf("policy does not match the plugin's identity in the release namespace: %+v", vap.Spec.MatchConditions)
	}
	b := m.get("ValidatingAdmissionPolicyBinding", "gpudra-resourceslices-own-node").(*admissionv1.ValidatingAdmissionPolicyBinding)
	if b.Spec.PolicyName != vap.Name || !slices.Equal(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) {
		t.Errorf("policy binding = %+v, want Deny for %s", b.Spec, vap.Name)
	}
	// Without the self-signed certificate the controller must not touch webhook configurations.
	ctl := render(t, valueSets["own webhook"]...).get("ClusterRole", "gpudra-controller").(*rbacv1.ClusterRole)
	if _, ok := verbsByResource(ctl)["admissionregistration.k8s.io/validatingwebhookconfigurations"]; ok {
		t.Error("controller with a certificate Secret may still patch webhook configurations")
	}
}

// TestOptionalParts proves the webhook, Kueue objects, topology ConfigMap and sharing
// defaults appear exactly when asked for.
func TestOptionalParts(t *testing.T) {
	def := render(t)
	for _, kind := range []string{"AdmissionCheck", "ClusterQueue", "LocalQueue", "ResourceFlavor", "WorkloadPriorityClass", "Namespace", "ConfigMap"} {
		if got := slices.DeleteFunc(def.names(kind), func(n string) bool { return n == "gpudra-mig-layouts" }); len(got) > 0 {
			t.Errorf("defaults render %s %v", kind, got)
		}
	}

	off := render(t, valueSets["no webhook"]...)
	if got := off.names("ValidatingWebhookConfiguration"); len(got) > 0 {
		t.Errorf("webhook.enabled=false renders %v", got)
	}
	if args := off.get("Deployment", "gpudra-controller").(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Args; slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--webhook") }) {
		t.Errorf("webhook.enabled=false: controller args %v", args)
	}

	check := render(t, "kueue.admissionCheck=true")
	if got := check.names("AdmissionCheck"); !slices.Equal(got, []string{"gpudra-topology"}) || len(check.names("ClusterQueue")) > 0 {
		t.Errorf("kueue.admissionCheck=true: AdmissionChecks %v, ClusterQueues %v; want only the check", got, check.names("ClusterQueue"))
	}
	samples := render(t, valueSets["kueue"]...)
	if got := samples.names("ClusterQueue"); !slices.Equal(got, []string{"team-a", "team-b"}) {
		t.Errorf("kueue.samples=true: ClusterQueues %v", got)
	}

	own := render(t, valueSets["own webhook"]...)
	for _, w := range own.get("ValidatingWebhookConfiguration", "gpudra-config-validation").(*admissionv1.ValidatingWebhookConfiguration).Webhooks {
		if w.ClientConfig.URL == nil || w.ClientConfig.Service != nil || string(w.ClientConfig.CABundle) != "CA\n" {
			t.Errorf("webhook %s with url and caBundle: clientConfig %+v", w.Name, w.ClientConfig)
		}
	}

	hami := render(t, valueSets["hami topology"]...)
	cm := hami.get("ConfigMap", "gpudra-topology").(*corev1.ConfigMap)
	if f, err := network.ParseFile([]byte(cm.Data[network.FileKey])); err != nil || len(f.Blocks) != 1 {
		t.Errorf("topology ConfigMap is not a valid topology file: %v\n%s", err, cm.Data[network.FileKey])
	}
	ctl := hami.get("Deployment", "gpudra-controller").(*appsv1.Deployment).Spec.Template.Spec.Containers[0]
	for _, arg := range []string{"--topology-configmap=gpudra/gpudra-topology", "--topology-flavor-node-labels=nvidia.com/gpu.present=true"} {
		if !slices.Contains(ctl.Args, arg) {
			t.Errorf("controller args %v lack %s", ctl.Args, arg)
		}
	}
	plugin := hami.get("DaemonSet", "gpudra-kubelet-plugin").(*appsv1.DaemonSet).Spec.Template.Spec
	if !slices.Contains(plugin.Containers[0].Args, "--vgpu-library=/usr/local/vgpu/libvgpu.so") || mountOf(plugin.Containers[0], hostPathsOf(plugin), "/usr/local/vgpu/libvgpu.so") == nil {
		t.Errorf("vgpuLibrary: plugin args %v / volumes do not carry libvgpu.so", plugin.Containers[0].Args)
	}
	share := hami.get("DeviceClass", "gpu-share.gpudra.dev").(*resourceapi.DeviceClass)
	if len(share.Spec.Config) != 1 || share.Spec.Config[0].Opaque == nil {
		t.Fatalf("sharing default not in DeviceClass: %+v", share.Spec.Config)
	}
	if err := api.ValidateOpaque(share.Spec.Config[0].Opaque.Parameters.Raw, field.NewPath("spec", "config").Index(0).Child("opaque", "parameters")); err != nil {
		t.Errorf("sharing default is not a valid gpudra config: %v", err)
	}
	// Helm creates DeviceClasses after the webhook configuration, before the controller
	// serves it: the chart's own classes with defaults must not wait for the webhook.
	for _, w := range hami.get("ValidatingWebhookConfiguration", "gpudra-config-validation").(*admissionv1.ValidatingWebhookConfiguration).Webhooks {
		skipsOwn := slices.ContainsFunc(w.MatchConditions, func(c admissionv1.MatchCondition) bool { return c.Name == "not-this-charts-device-class" })
		if skipsOwn != (w.Name == "deviceclasses.gpu.gpudra.dev") {
			t.Errorf("webhook %s: skips the chart's own DeviceClasses = %v", w.Name, skipsOwn)
		}
	}
}

// TestBadValuesAreRefused proves values that cannot work fail the install, naming the value.
func TestBadValuesAreRefused(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"kubeletPlugin.nvml=cuda", `kubeletPlugin.nvml="cuda"`},
		{"kubeletPlugin.mig=mixed", `kubeletPlugin.mig="mixed"`},
		{"kubeletPlugin.publish=inference", `kubeletPlugin.publish="inference": accepted values are all, training, whole`},
		{`kubeletPlugin.pools=[{"name":"t","publish":"training","mig":"dynamic"}]`, "kubeletPlugin.pools[t].publish=training publishes no MIG devices: kubeletPlugin.pools[t].mig must be static or none, not dynamic"},
		{"kubeletPlugin.mpsControlDaemons=thread", `kubeletPlugin.mpsControlDaemons="thread": accepted values are pod, process`},
		{`kubeletPlugin.pools=[{"name":"p","mpsControlDaemons":"host"}]`, `kubeletPlugin.pools[p].mpsControlDaemons="host"`},
		{`kubeletPlugin.pools=[{"name":"Big_Pool"}]`, "kubeletPlugin.pools[].name"},
		{`kubeletPlugin.pools=[{"name":"p","nvml":"fake"}]`, `kubeletPlugin.pools[p].nvml="fake"`},
		{`kubeletPlugin.pools=[{"name":"amd","nvml":"none"}]`, "kubeletPlugin.pools[amd].nvml=none publishes no GPU: set kubeletPlugin.pools[amd].kfd"},
		{`kubeletPlugin.pools=[{"name":"amd","kfd":"rocm"}]`, `kubeletPlugin.pools[amd].kfd="rocm": accepted values are "", "sysfs" or "sim:<profile>"`},
		{"kubeletPlugin.defaultPool=false", "no node would run the plugin"},
		{`kubeletPlugin.pools=[{"name":"p","hostNetwrok":true}]`, "kubeletPlugin.pools[p].hostNetwrok: not a kubeletPlugin value; a pool may set"},
		{"kubernetesService.host=10.0.0.1", "kubernetesService.port: required"},
		{"controller.kubeAPIQPS=fast", "controller.kubeAPIQPS=fast: want a number"},
		{"controller.kubeAPIQPS=0", "controller.kubeAPIQPS=0: client-go reads 0 as its default of 5 requests/s"},
		{"controller.kubeAPIBurst=-1", "controller.kubeAPIBurst=-1: want an integer >= 0"},
		{"controller.kubeAPIBurst=1.5", "controller.kubeAPIBurst=1.5: want an integer >= 0"},
		{"controller.admissionCheckWorkers=0", "controller.admissionCheckWorkers=0: want an integer >= 1"},
		{"controller.admissionCheckWorkers=true", "controller.admissionCheckWorkers=true: want an integer >= 1"},
		{"controller.replicas=0", "controller.replicas=0: want an integer >= 1"},
		{"webhook.certManagement=manual", `webhook.certManagement="manual": accepted values are rotate, selfSigned`},
		{"webhook.certManagement=selfSigned", "webhook.certManagement=selfSigned with controller.replicas=2: each replica would make and inject a CA of its own"},
		{`webhook.extraCertNames=["127.0.0.1"]`, `webhook.extraCertNames: "127.0.0.1" is not a DNS name`},
	} {
		out, err := template(t, []string{tc.set})
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("--set %s: err %v, output should name %s:\n%s", tc.set, err, tc.want, out)
		}
	}
}

// TestChartMatchesPlainManifests keeps the plain manifests (what `kubectl apply -f` users and
// the tests outside the chart read) and the chart from drifting: rendered for namespace gpudra
// with the webhook and the Kueue samples on, the chart holds exactly the same objects.
func TestChartMatchesPlainManifests(t *testing.T) {
	rendered := render(t, valueSets["kueue"]...)
	var plain manifest
	for _, pattern := range []string{"deviceclasses/*.yaml", "rbac/*.yaml", "webhook/*.yaml", "kueue/00-*.yaml", "kueue/10-*.yaml"} {
		files, _ := filepath.Glob(filepath.Join("..", pattern))
		if len(files) == 0 {
			t.Fatalf("no plain manifests match deployments/%s", pattern)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			m, err := decodeManifest(data)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			plain.objs = append(plain.objs, m.objs...)
		}
	}
	covered := map[string]bool{}
	for _, p := range plain.objs {
		covered[p.kind] = true
		got := rendered.getIn(p.kind, p.namespace, p.name)
		if got == nil {
			t.Errorf("%s %s/%s is in the plain manifests but not in the chart", p.kind, p.namespace, p.name)
			continue
		}
		got = withoutLabels(t, got)
		if want := withoutLabels(t, p.obj); !apiequality.Semantic.DeepEqual(got, want) {
			t.Errorf("%s %s/%s differs between the plain manifests (-) and the chart (+):\n%s", p.kind, p.namespace, p.name, diff.Diff(want, got))
		}
	}
	for _, r := range rendered.objs {
		if covered[r.kind] && plain.getIn(r.kind, r.namespace, r.name) == nil {
			t.Errorf("%s %s/%s is in the chart but not in the plain manifests", r.kind, r.namespace, r.name)
		}
	}
}

func withoutLabels(t *testing.T, obj any) any {
	t.Helper()
	acc, err := meta.Accessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	acc.SetLabels(nil)
	return obj
}

func verbsByResource(r *rbacv1.ClusterRole) map[string][]string { return verbsByRules(r.Rules) }

func verbsByRules(rules []rbacv1.PolicyRule) map[string][]string {
	out := map[string][]string{}
	for _, rule := range rules {
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				out[g+"/"+res] = slices.Sorted(slices.Values(slices.Concat(out[g+"/"+res], rule.Verbs)))
			}
		}
	}
	return out
}

func hostPathsOf(spec corev1.PodSpec) map[string]string {
	out := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			out[v.Name] = v.HostPath.Path
		}
	}
	return out
}

func mountOf(c corev1.Container, hostPaths map[string]string, host string) *corev1.VolumeMount {
	for i, m := range c.VolumeMounts {
		if hostPaths[m.Name] == host {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

func envOf(c corev1.Container, name string) *corev1.EnvVar {
	for i, e := range c.Env {
		if e.Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// A pool of AMD nodes runs the plugin on the KFD topology and without NVML.
func TestAMDPoolRunsThePluginOnKFD(t *testing.T) {
	out, err := template(t, []string{`kubeletPlugin.pools=[{"name":"amd","nvml":"none","kfd":"sysfs","nodeSelector":{"gpudra.dev/node-pool":"amd"}}]`})
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"--nvml=none", "--kfd=sysfs"} {
		if !strings.Contains(out, want) {
			t.Errorf("the AMD pool's plugin lacks %s", want)
		}
	}
}

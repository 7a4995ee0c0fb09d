package lab

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// gpudra-controller runs as the chart runs it: controller.replicas replicas (the lab file's
// controller.replicas) that elect a leader on Lease gpudra/gpudra-controller (the leader
// answers the admission check and labels nodes), every one serving the config webhook with
// the certificate the replicas keep in Secret gpudra/gpudra-webhook-cert (cert-controller:
// made when the Secret is empty, renewed before it expires, its CA injected into the
// webhook configuration). With install: processes the lab runs them as the identity their
// Deployment would have (the ServiceAccount of deployments/rbac/controller.yaml, so the
// shipped RBAC is what they get) with the chart's flags; with install: chart it runs the
// chart's pods (chart.go).
//
// Around the replicas, the lab does what a node and a cluster would do for their pods:
//   - Secret volume: per replica, a secret-volume helper (certsync.go) keeps the replica's
//     --webhook-cert-dir in step with the Secret, as the kubelet does with the pod's
//     Secret volume; the webhook serves once the files are there.
//   - Service: the webhook configuration calls https://localhost:<port>, where a service
//     helper stands for the controller's Service and kube-proxy (there is neither here): it
//     sends each connection to the next replica in turn, and to the other one when a
//     replica does not accept. So the API server reaches a webhook as long as one replica
//     serves, whichever one is the leader, as through the Service of the chart, and a test
//     can stop any replica. localhost, not 127.0.0.1: the certificate cert-controller makes
//     names DNS names only.
const (
	controllerComponent = "gpudra-controller"
	controllerNamespace = "gpudra"
	controllerUser      = "system:serviceaccount:gpudra:gpudra-controller"
	// WebhookPath is the config webhook's path (as in package webhook).
	WebhookPath = "/validate-gpudra-config"
	// HAMiWebhookPath is the HAMi pods' webhook's path (as in package webhook).
	HAMiWebhookPath = "/mutate-hami-pods"
	// LargeJobsFirstBands are the controllers' --large-jobs-first-bands: the chart's
	// defaults, whose classes deployments/webhook/large-jobs-first.yaml installs. A queued
	// Job without a priority of its own of 16 GPUs or more is ordered first.
	LargeJobsFirstBands = "16:gpudra-large,64:gpudra-huge"
	// ControllerLease is the Lease the replicas elect their leader with, in controllerNamespace.
	ControllerLease = "gpudra-controller"
	// WebhookCertSecret is the Secret, in controllerNamespace, that the replicas keep the
	// webhook's CA and serving certificate in (the chart's name).
	WebhookCertSecret = "gpudra-webhook-cert"
	// ControllerServiceComponent is the service helper in front of the replicas' webhooks.
	ControllerServiceComponent = "gpudra-controller-service"
	// WebhookHost is the name the API server calls the webhook at.
	WebhookHost = "localhost"
)

// webhookCertNames are the DNS names of the webhook's certificate: the chart's for its
// Service, then the lab's WebhookHost.
var webhookCertNames = []string{"gpudra-controller.gpudra.svc", "gpudra-controller.gpudra", "gpudra-controller", WebhookHost}

// CertSyncComponent is the component name of the secret-volume helper of a controller
// replica's certificate folder.
func CertSyncComponent(controller string) string { return controller + "-certs" }

// controllerPortNames are the ports up reserves for replicas controller replicas: the
// service's, then health, metrics and webhook of each.
func controllerPortNames(replicas int) []string {
	if replicas == 0 {
		return nil
	}
	names := []string{"controller-webhook"}
	for i := range replicas {
		for _, p := range []string{"health", "metrics", "webhook"} {
			names = append(names, "controller-"+p+"-"+strconv.Itoa(i))
		}
	}
	return names
}

// controllerReplica is one replica the lab runs: its command line and environment, and
// where its certificate folder and ports are.
type controllerReplica struct {
	name                     string
	argv, env                []string
	certDir                  string
	secret                   string // namespace/name of the Secret synced into certDir
	health, metrics, webhook int
}

// replicaPorts are the health, metrics and webhook ports of replica i.
func (u *upper) replicaPorts(i int) (health, metrics, webhook int) {
	n := strconv.Itoa(i)
	return u.port("controller-health-" + n), u.port("controller-metrics-" + n), u.port("controller-webhook-" + n)
}

// webhookURL is where the API server calls the config webhook (the service helper).
func (u *upper) webhookURL() string {
	return "https://" + WebhookHost + ":" + strconv.Itoa(u.port("controller-webhook")) + WebhookPath
}

// startController runs gpudra-controller's replicas from binary (install: processes).
func (u *upper) startController(ctx context.Context, binary string) error {
	cfg, err := u.state.RESTConfig()
	if err != nil {
		return err
	}
	ap, err := NewApplier(cfg)
	if err != nil {
		return err
	}
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": controllerNamespace}}}
	// Created empty, as the chart creates it: the replicas fill it in.
	secret := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
		"metadata": map[string]any{"name": WebhookCertSecret, "namespace": controllerNamespace}}}
	if err := ap.Apply(ctx, ns, secret); err != nil {
		return &ComponentError{Component: controllerComponent, Err: err}
	}
	for _, f := range []string{"deployments/rbac/controller.yaml", "deployments/rbac/controller-job-dependencies.yaml", "deployments/rbac/controller-large-jobs-first.yaml", "deployments/rbac/controller-data-prewarm.yaml", "deployments/rbac/kubelet-plugin.yaml", "deployments/kueue/00-admission-check.yaml"} {
		objs, err := ReadManifests(filepath.Join(u.opts.Repo, f))
		if err != nil {
			return &ComponentError{Component: controllerComponent, Err: err}
		}
		if err := ap.Apply(ctx, objs...); err != nil {
			return &ComponentError{Component: controllerComponent, Err: fmt.Errorf("%s: %w", f, err)}
		}
	}
	var hooks []*unstructured.Unstructured
	// The config webhook, the HAMi pods' webhook with its RBAC (--hami-pods below), the
	// job dependencies' webhook, and large jobs first's with its bands' classes (the
	// controllers run with every gate on).
	for _, f := range []string{"deployments/webhook/config-validation.yaml", "deployments/hami/hami-pods.yaml", "deployments/webhook/job-dependencies.yaml", "deployments/webhook/large-jobs-first.yaml"} {
		objs, err := ReadManifests(filepath.Join(u.opts.Repo, f))
		if err != nil {
			return &ComponentError{Component: controllerComponent, Err: err}
		}
		for _, h := range objs {
			if strings.HasSuffix(h.GetKind(), "WebhookConfiguration") {
				if err := pointWebhooksAt(h, strings.TrimSuffix(u.webhookURL(), WebhookPath)); err != nil {
					return &ComponentError{Component: controllerComponent, Err: err}
				}
			}
		}
		hooks = append(hooks, objs...)
	}
	if err := ap.Apply(ctx, hooks...); err != nil {
		return &ComponentError{Component: controllerComponent, Err: err}
	}
	kc, err := u.componentKubeconfig(controllerComponent, controllerUser, "system:serviceaccounts", "system:serviceaccounts:"+controllerNamespace)
	if err != nil {
		return err
	}
	n := u.state.ControllerReplicas
	var rs []controllerReplica
	for i := range n {
		name := ControllerComponent(i, n)
		health, metrics, webhook := u.replicaPorts(i)
		certs := filepath.Join(u.layout.ComponentDir(name), "certs")
		rs = append(rs, controllerReplica{name: name, certDir: certs, secret: controllerNamespace + "/" + WebhookCertSecret,
			health: health, metrics: metrics, webhook: webhook,
			argv: []string{binary,
				"--kubeconfig=" + kc,
				"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(metrics),
				"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(health),
				// The chart's flags.
				"--leader-elect",
				"--leader-election-id=" + ControllerLease,
				"--leader-election-namespace=" + controllerNamespace,
				"--webhook-port=" + strconv.Itoa(webhook),
				"--webhook-host=127.0.0.1",
				"--webhook-cert-dir=" + certs,
				"--webhook-cert-secret=" + controllerNamespace + "/" + WebhookCertSecret,
				"--webhook-cert-dns-names=" + strings.Join(webhookCertNames, ","),
				"--hami-pods",
				// The chart's default bands (gate LargeJobsFirst is on, as every gate).
				"--large-jobs-first-bands=" + LargeJobsFirstBands,
				// A lab is for developers: Go's profiles beside the metrics (on 127.0.0.1).
				"--profiling",
				gpudraFeatureGatesFlag(),
			}})
	}
	return u.runControllers(ctx, rs)
}

// runControllers starts each replica with the secret-volume helper of its certificate
// folder, and the service helper in front of their webhooks, and waits until every replica
// is ready and the API server calls the webhook.
func (u *upper) runControllers(ctx context.Context, rs []controllerReplica) error {
	svc := u.port("controller-webhook")
	args := []string{"--listen=127.0.0.1:" + strconv.Itoa(svc)}
	for _, r := range rs {
		args = append(args, "--backend=127.0.0.1:"+strconv.Itoa(r.webhook))
	}
	argv, env, err := helperProcess(helperService, args...)
	if err != nil {
		return &ComponentError{Component: ControllerServiceComponent, Err: err}
	}
	if _, err := u.start(ControllerServiceComponent, argv, env, map[string]int{"webhook": svc}); err != nil {
		return err
	}
	var cs []Component
	for _, r := range rs {
		// The Secret is read with the lab's admin credentials: kwok's nodes have no kubelet
		// identity to read it with.
		argv, env, err := helperProcess(helperSecretVolume, "--kubeconfig="+u.layout.Kubeconfig(), "--secret="+r.secret, "--dir="+r.certDir)
		if err != nil {
			return &ComponentError{Component: CertSyncComponent(r.name), Err: err}
		}
		if _, err := u.start(CertSyncComponent(r.name), argv, env, nil); err != nil {
			return err
		}
		c, err := u.start(r.name, r.argv, r.env, map[string]int{"health": r.health, "metrics": r.metrics, "webhook": r.webhook})
		if err != nil {
			return err
		}
		cs = append(cs, c)
	}
	for _, c := range cs {
		if err := waitReady(ctx, c, "ready", componentTimeout, httpGetter("http://127.0.0.1:"+strconv.Itoa(c.Ports["health"])+"/readyz", nil, "ok")); err != nil {
			return err
		}
	}
	return u.waitWebhook(ctx, cs[0])
}

// waitWebhook waits until the API server calls the config webhook (c: a replica, whose
// exit ends the wait).
func (u *upper) waitWebhook(ctx context.Context, c Component) error {
	// A dry-run create of a claim with an invalid gpudra config must come back refused by the
	// webhook: then the API server reaches and trusts it.
	probe := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "gpudra-lab-webhook-probe", Namespace: "default"}}
	probe.Spec.Devices.Requests = []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: api.DeviceClassGPU}}}
	probe.Spec.Devices.Config = []resourcev1.DeviceClaimConfiguration{{DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
		Driver: api.DriverName, Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"` + api.APIVersion + `","kind":"NoSuchKind"}`)}}}}}
	return waitReady(ctx, c, "answering its config webhook", componentTimeout, func(ctx context.Context) error {
		_, err := u.client.ResourceV1().ResourceClaims("default").Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
			return nil // refused by the webhook, as it should be
		}
		if err == nil {
			return fmt.Errorf("an invalid gpudra config was admitted: the webhook is not called yet")
		}
		return err
	})
}

// pointWebhooksAt rewrites a webhook configuration's service references to a URL: with no
// kube-proxy the API server cannot reach a Service's cluster IP.
func pointWebhooksAt(obj *unstructured.Unstructured, base string) error {
	hooks, ok, err := unstructured.NestedSlice(obj.Object, "webhooks")
	if err != nil || !ok {
		return fmt.Errorf("%s: no webhooks: %v", obj.GetName(), err)
	}
	for k := range hooks {
		h := hooks[k].(map[string]any)
		cc, _ := h["clientConfig"].(map[string]any)
		svc, _ := cc["service"].(map[string]any)
		path, _ := svc["path"].(string)
		h["clientConfig"] = map[string]any{"url": base + path}
	}
	return unstructured.SetNestedSlice(obj.Object, hooks, "webhooks")
}

// chartControllerValues are the chart's controller and webhook values in a lab: its
// replicas, the webhook called at the service helper, with the certificate the replicas
// keep in the chart's Secret (webhook.certManagement rotate) for WebhookHost too, and the
// HAMi pods' webhook for the namespaces labelled gpudra.dev/hami-pods=enabled.
func (u *upper) chartControllerValues() (controller, webhook map[string]any) {
	return map[string]any{"enabled": u.file.Kueue.Enabled, "replicas": max(u.state.ControllerReplicas, 1)},
		map[string]any{"url": u.webhookURL(), "certManagement": "rotate", "extraCertNames": []string{WebhookHost},
			"hamiPods": map[string]any{"enabled": u.file.Kueue.Enabled, "url": strings.TrimSuffix(u.webhookURL(), WebhookPath) + HAMiWebhookPath}}
}

// startChartControllers runs the chart's controller pods, each as a replica with its
// Secret volume kept in sync, and waits until they are ready and the API server calls
// their webhook.
func (u *upper) startChartControllers(ctx context.Context) error {
	n := u.state.ControllerReplicas
	pods, err := u.chartPods(ctx, "controller", n)
	if err != nil {
		return err
	}
	var rs []controllerReplica
	for i, pod := range pods {
		name := ControllerComponent(i, n)
		secret, err := webhookCertVolume(pod)
		if err != nil {
			return &ComponentError{Component: name, Err: err}
		}
		health, metrics, webhook := u.replicaPorts(i)
		certs := filepath.Join(u.layout.ComponentDir(name), "certs")
		argv, env, err := u.podProcess(ctx, pod, name,
			"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(metrics),
			"--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(health),
			"--webhook-host=127.0.0.1", "--webhook-port="+strconv.Itoa(webhook),
			// Where the lab keeps the pod's Secret volume.
			"--webhook-cert-dir="+certs)
		if err != nil {
			return &ComponentError{Component: name, Err: err}
		}
		rs = append(rs, controllerReplica{name: name, argv: argv, env: env, certDir: certs, secret: pod.Namespace + "/" + secret,
			health: health, metrics: metrics, webhook: webhook})
	}
	return u.runControllers(ctx, rs)
}

// webhookCertVolume is the Secret of the volume a chart's controller pod mounts at its
// --webhook-cert-dir, which the pod's --webhook-cert-secret keeps the certificate in.
func webhookCertVolume(pod *corev1.Pod) (string, error) {
	if len(pod.Spec.Containers) != 1 {
		return "", fmt.Errorf("pod %s: the lab runs controller pods of one container", pod.Name)
	}
	c := pod.Spec.Containers[0]
	flag := func(name string) string {
		v := ""
		for _, a := range c.Args {
			if s, ok := strings.CutPrefix(a, "--"+name+"="); ok {
				v = s
			}
		}
		return v
	}
	dir, kept := flag("webhook-cert-dir"), flag("webhook-cert-secret")
	if dir == "" || kept == "" {
		return "", fmt.Errorf("pod %s: no --webhook-cert-dir and --webhook-cert-secret: the lab runs controllers whose certificate is kept in a Secret (webhook.certManagement rotate)", pod.Name)
	}
	for _, m := range c.VolumeMounts {
		if m.MountPath != dir {
			continue
		}
		for _, v := range pod.Spec.Volumes {
			if v.Name != m.Name {
				continue
			}
			if v.Secret == nil {
				return "", fmt.Errorf("pod %s: volume %s at --webhook-cert-dir=%s is not a Secret", pod.Name, v.Name, dir)
			}
			if want := pod.Namespace + "/" + v.Secret.SecretName; want != kept {
				return "", fmt.Errorf("pod %s: --webhook-cert-secret=%s, but the volume at --webhook-cert-dir=%s is Secret %s", pod.Name, kept, dir, want)
			}
			return v.Secret.SecretName, nil
		}
	}
	return "", fmt.Errorf("pod %s: nothing is mounted at --webhook-cert-dir=%s", pod.Name, dir)
}

// chartPods waits until n pods of the chart's component run on kwok nodes and returns
// them by name.
func (u *upper) chartPods(ctx context.Context, component string, n int) ([]*corev1.Pod, error) {
	var found []*corev1.Pod
	var last error
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, componentTimeout, true, func(ctx context.Context) (bool, error) {
		pods, err := u.client.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{LabelSelector: ChartPodSelector(component)})
		if err != nil {
			last = err
			return false, nil
		}
		found = found[:0]
		for i := range pods.Items {
			if p := &pods.Items[i]; p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
				found = append(found, p)
			}
		}
		if len(found) < n {
			last = fmt.Errorf("%d of %d %s pods of release %s are on a node (%d pods of the component)", len(found), n, component, chartRelease, len(pods.Items))
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return nil, &ComponentError{Component: "helm release " + chartRelease, Log: u.layout.Log("kube-controller-manager"), Err: fmt.Errorf("the chart's %s pods: %w (last: %v)", component, err, last)}
	}
	sort.Slice(found, func(i, j int) bool { return found[i].Name < found[j].Name })
	return found[:n], nil
}

package lab

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// gpudra-controller runs out of cluster as the identity its Deployment would have (the
// ServiceAccount of deployments/rbac/controller.yaml, so the shipped RBAC is what it gets),
// serves its config webhook on 127.0.0.1 and publishes the webhook's CA itself.
const (
	controllerComponent = "gpudra-controller"
	controllerNamespace = "gpudra"
	controllerUser      = "system:serviceaccount:gpudra:gpudra-controller"
	// WebhookPath is the config webhook's path (as in package webhook).
	WebhookPath = "/validate-gpudra-config"
)

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
	if err := ap.Apply(ctx, ns); err != nil {
		return &ComponentError{Component: controllerComponent, Err: err}
	}
	for _, f := range []string{"deployments/rbac/controller.yaml", "deployments/rbac/kubelet-plugin.yaml", "deployments/kueue/00-admission-check.yaml"} {
		objs, err := ReadManifests(filepath.Join(u.opts.Repo, f))
		if err != nil {
			return &ComponentError{Component: controllerComponent, Err: err}
		}
		if err := ap.Apply(ctx, objs...); err != nil {
			return &ComponentError{Component: controllerComponent, Err: fmt.Errorf("%s: %w", f, err)}
		}
	}
	webhookPort := u.port("controller-webhook")
	hooks, err := ReadManifests(filepath.Join(u.opts.Repo, "deployments/webhook/config-validation.yaml"))
	if err != nil {
		return &ComponentError{Component: controllerComponent, Err: err}
	}
	for _, h := range hooks {
		if err := pointWebhooksAt(h, "https://127.0.0.1:"+strconv.Itoa(webhookPort)); err != nil {
			return &ComponentError{Component: controllerComponent, Err: err}
		}
	}
	if err := ap.Apply(ctx, hooks...); err != nil {
		return &ComponentError{Component: controllerComponent, Err: err}
	}
	kc, err := u.componentKubeconfig(controllerComponent, controllerUser, "system:serviceaccounts", "system:serviceaccounts:"+controllerNamespace)
	if err != nil {
		return err
	}
	health := u.port("controller-health")
	argv := []string{binary,
		"--kubeconfig=" + kc,
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(u.port("controller-metrics")),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(health),
		"--webhook-port=" + strconv.Itoa(webhookPort),
		"--webhook-host=127.0.0.1",
		"--webhook-cert-dir=" + filepath.Join(u.layout.ComponentDir(controllerComponent), "certs"),
		"--webhook-self-signed=127.0.0.1,localhost",
		// A lab is for developers: Go's profiles beside the metrics (on 127.0.0.1).
		"--profiling",
	}
	c, err := u.start(controllerComponent, argv, nil, map[string]int{"health": health, "metrics": u.port("controller-metrics"), "webhook": webhookPort})
	if err != nil {
		return err
	}
	return u.waitController(ctx, c, health)
}

// waitController waits until gpudra-controller is ready and the API server calls its
// config webhook.
func (u *upper) waitController(ctx context.Context, c Component, health int) error {
	if err := waitReady(ctx, c, "ready", componentTimeout, httpGetter("http://127.0.0.1:"+strconv.Itoa(health)+"/readyz", nil, "ok")); err != nil {
		return err
	}
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

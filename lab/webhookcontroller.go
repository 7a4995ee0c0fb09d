package lab

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// What the lab does alike for the controllers it runs out of cluster with webhooks (Kueue,
// JobSet): render their kustomized config folders, apply their CRDs before the rest, start
// them with a configuration file, and wait until the API server reaches their webhooks.

// manifestReader returns a function decoding the manifests of a file under configDir.
func manifestReader(configDir string) func(rel string) ([]*unstructured.Unstructured, error) {
	return func(rel string) ([]*unstructured.Unstructured, error) {
		data, err := os.ReadFile(filepath.Join(configDir, rel))
		if err != nil {
			return nil, err
		}
		return DecodeManifests(data)
	}
}

// kustomizedObjects is the Namespace k works in followed by the objects of files, through k.
func kustomizedObjects(read func(string) ([]*unstructured.Unstructured, error), k kustomization, files ...string) ([]*unstructured.Unstructured, error) {
	out := []*unstructured.Unstructured{{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": k.namespace},
	}}}
	for _, f := range files {
		objs, err := read(f)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			out = append(out, k.apply(o))
		}
	}
	return out, nil
}

// localhostWebhookService is an ExternalName Service namespace/name pointing at localhost, by
// which the API server reaches webhooks served on the lab machine's port.
func localhostWebhookService(namespace, name string, port int) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec": map[string]any{"type": "ExternalName", "externalName": "localhost",
			"ports": []any{map[string]any{"name": "webhook", "port": int64(port), "protocol": "TCP"}}},
	}}
}

// applyWithCRDs applies crds, waits until the API server serves them (a controller's
// informers fail on kinds that are not served yet; what names them in the wait), then applies
// rest. It returns a dynamic client for the component's later checks.
func (u *upper) applyWithCRDs(ctx context.Context, component, what string, crds, rest []*unstructured.Unstructured) (dynamic.Interface, error) {
	ap, dyn, err := u.clients()
	if err != nil {
		return nil, err
	}
	if err := serveCRDs(ctx, ap, dyn, *u.state.Component("kube-apiserver"), component, what, crds); err != nil {
		return nil, err
	}
	if err := ap.Apply(ctx, rest...); err != nil {
		return nil, &ComponentError{Component: component, Err: err}
	}
	return dyn, nil
}

// clients returns an applier and a dynamic client of the lab's API server.
func (u *upper) clients() (*Applier, dynamic.Interface, error) {
	cfg, err := u.state.RESTConfig()
	if err != nil {
		return nil, nil, err
	}
	ap, err := NewApplier(cfg)
	if err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	return ap, dyn, nil
}

// serveCRDs applies crds and waits until the API server has Established each one.
func serveCRDs(ctx context.Context, ap *Applier, dyn dynamic.Interface, apiserver Component, component, what string, crds []*unstructured.Unstructured) error {
	if err := ap.Apply(ctx, crds...); err != nil {
		return &ComponentError{Component: component, Err: err}
	}
	return waitReady(ctx, apiserver, what, componentTimeout, func(ctx context.Context) error {
		for _, c := range crds {
			obj, err := dyn.Resource(crdGVR).Get(ctx, c.GetName(), metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !crdEstablished(obj) {
				return fmt.Errorf("CRD %s not Established yet", c.GetName())
			}
		}
		return nil
	})
}

// componentCertDir makes and returns the folder a component serves its webhook
// certificate from.
func (u *upper) componentCertDir(component string) (string, error) {
	certDir := filepath.Join(u.layout.ComponentDir(component), "certs")
	return certDir, os.MkdirAll(certDir, 0o700)
}

// webhookServingCert issues the serving certificate of a component's webhooks, reached as
// Service namespace/service or on 127.0.0.1, from the lab's CA, and writes it as tls.crt and
// tls.key into the component's certificate folder, which it returns.
func (u *upper) webhookServingCert(component, namespace, service string) (string, error) {
	certDir, err := u.componentCertDir(component)
	if err != nil {
		return "", err
	}
	serving, err := u.pki.CA.Issue(CertSpec{CommonName: service, Server: true,
		DNSNames: []string{service + "." + namespace + ".svc", "localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		return "", fmt.Errorf("%s's webhook certificate: %w", component, err)
	}
	for name, data := range map[string][]byte{"tls.crt": serving.CertPEM, "tls.key": serving.KeyPEM} {
		if err := os.WriteFile(filepath.Join(certDir, name), data, 0o600); err != nil {
			return "", err
		}
	}
	return certDir, nil
}

// startConfiguredController writes config as the component's config.yaml, starts binary
// --config=config.yaml as user, with ports (its "health" port serving /readyz), waits for
// certsReady unless nil and then until the controller is ready.
func (u *upper) startConfiguredController(ctx context.Context, component, binary, user string, config []byte,
	ports map[string]int, certsReady func(context.Context) error) (Component, error) {
	configFile := filepath.Join(u.layout.ComponentDir(component), "config.yaml")
	if err := os.WriteFile(configFile, config, 0o600); err != nil {
		return Component{}, err
	}
	kc, err := u.componentKubeconfig(component, user)
	if err != nil {
		return Component{}, err
	}
	c, err := u.start(component, []string{binary, "--config=" + configFile}, []string{"KUBECONFIG=" + kc}, ports)
	if err != nil {
		return c, err
	}
	if certsReady != nil {
		if err := waitReady(ctx, c, "writing its webhook certificate", componentTimeout, certsReady); err != nil {
			return c, err
		}
	}
	health := "http://127.0.0.1:" + strconv.Itoa(ports["health"]) + "/readyz"
	return c, waitReady(ctx, c, "ready", componentTimeout, httpGetter(health, nil, "ok"))
}

// waitWebhooksAnswer waits until a dry-run create of probe (in namespace, unless "") goes
// through the webhooks that see it: the API server reaches and trusts them.
func waitWebhooksAnswer(ctx context.Context, c Component, dyn dynamic.Interface, gvr schema.GroupVersionResource, namespace string, probe *unstructured.Unstructured) error {
	return waitReady(ctx, c, "answering its webhooks", componentTimeout, func(ctx context.Context) error {
		_, err := dyn.Resource(gvr).Namespace(namespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}

// shippedConfig is the Configuration a controller (owner) installs with, its
// config/components/manager/controller_manager_config.yaml, which must be of apiVersion kind.
func shippedConfig(configDir, owner, kind string) (map[string]any, error) {
	shipped := filepath.Join(configDir, "manager", "controller_manager_config.yaml")
	data, err := os.ReadFile(shipped)
	if err != nil {
		return nil, fmt.Errorf("%s's shipped configuration: %w", owner, err)
	}
	cfg := map[string]any{}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", shipped, err)
	}
	if cfg["apiVersion"] != kind {
		return nil, fmt.Errorf("%s: apiVersion %v, want %s", shipped, cfg["apiVersion"], kind)
	}
	return cfg, nil
}

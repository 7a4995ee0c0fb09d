package lab

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// The JobSet controller runs out of cluster with a webhook certificate the lab's CA issues
// (its own rotation would wait for the certificate in a fixed /tmp folder, where a kubelet
// would mount its Secret), and the API server reaches its webhooks through an ExternalName
// Service pointing at localhost. With no service-account namespace file it works in
// jobset-system, as installed.
const (
	jobsetNamespace  = "jobset-system"
	jobsetService    = "jobset-webhook-service"
	jobsetPrefix     = "jobset-"
	jobsetConfigKind = "config.jobset.x-k8s.io/v1alpha1"
	jobsetUser       = "system:serviceaccount:" + jobsetNamespace + ":" + jobsetPrefix + "controller-manager"
	// labelJobSetName is on every pod of a JobSet; the JobSet pod webhooks see only those.
	labelJobSetName = "jobset.sigs.k8s.io/jobset-name"
)

var jobsetGVR = schema.GroupVersionResource{Group: "jobset.x-k8s.io", Version: "v1alpha2", Resource: "jobsets"}

// jobsetManifests renders what JobSet's config/default kustomization would install, for the
// lab: the CRD, the namespace, RBAC, an ExternalName webhook Service pointing at localhost,
// and the webhook configurations trusting caBundle, the pod webhooks limited to a JobSet's
// pods as its webhook patches do.
func jobsetManifests(configDir string, webhookPort int, caBundle []byte) (crds, rest []*unstructured.Unstructured, err error) {
	read := func(rel string) ([]*unstructured.Unstructured, error) {
		data, err := os.ReadFile(filepath.Join(configDir, rel))
		if err != nil {
			return nil, err
		}
		return DecodeManifests(data)
	}
	if crds, err = read("crd/bases/jobset.x-k8s.io_jobsets.yaml"); err != nil {
		return nil, nil, err
	}
	k := kustomization{prefix: jobsetPrefix, namespace: jobsetNamespace}
	rest = append(rest, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": jobsetNamespace},
	}})
	for _, f := range []string{"rbac/service_account.yaml", "rbac/role.yaml", "rbac/role_binding.yaml",
		"rbac/manager_secrets_role.yaml", "rbac/manager_secrets_role_binding.yaml"} {
		objs, err := read(f)
		if err != nil {
			return nil, nil, err
		}
		for _, o := range objs {
			rest = append(rest, k.apply(o))
		}
	}
	rest = append(rest, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": jobsetService, "namespace": jobsetNamespace},
		"spec": map[string]any{"type": "ExternalName", "externalName": "localhost",
			"ports": []any{map[string]any{"name": "webhook", "port": int64(webhookPort), "protocol": "TCP"}}},
	}})
	hooks, err := read("webhook/manifests.yaml")
	if err != nil {
		return nil, nil, err
	}
	for _, o := range hooks {
		o = k.apply(o)
		list, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		for _, w := range list {
			m, _ := w.(map[string]any)
			path, _, _ := unstructured.NestedString(m, "clientConfig", "service", "path")
			_ = unstructured.SetNestedField(m, map[string]any{"namespace": jobsetNamespace, "name": jobsetService, "path": path, "port": int64(webhookPort)}, "clientConfig", "service")
			_ = unstructured.SetNestedField(m, base64.StdEncoding.EncodeToString(caBundle), "clientConfig", "caBundle")
			if strings.HasSuffix(path, "--v1-pod") {
				m["objectSelector"] = map[string]any{"matchExpressions": []any{map[string]any{"key": labelJobSetName, "operator": "Exists"}}}
			}
		}
		_ = unstructured.SetNestedSlice(o.Object, list, "webhooks")
		rest = append(rest, o)
	}
	return crds, rest, nil
}

// jobsetLabConfig is the Configuration JobSet installs with
// (config/components/manager/controller_manager_config.yaml) with the lab's serving
// addresses and certificate folder, its own certificate management and its metrics server
// off.
func jobsetLabConfig(configDir, certDir string, port func(string) int) ([]byte, error) {
	shipped := filepath.Join(configDir, "manager", "controller_manager_config.yaml")
	data, err := os.ReadFile(shipped)
	if err != nil {
		return nil, fmt.Errorf("JobSet's shipped configuration: %w", err)
	}
	cfg := map[string]any{}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", shipped, err)
	}
	if cfg["apiVersion"] != jobsetConfigKind {
		return nil, fmt.Errorf("%s: apiVersion %v, want %s", shipped, cfg["apiVersion"], jobsetConfigKind)
	}
	cfg["health"] = map[string]any{"healthProbeBindAddress": "127.0.0.1:" + strconv.Itoa(port("jobset-health"))}
	cfg["metrics"] = map[string]any{"bindAddress": "0"}
	cfg["webhook"] = map[string]any{"host": "127.0.0.1", "port": port("jobset-webhook"), "certDir": certDir}
	cfg["leaderElection"] = map[string]any{"leaderElect": false}
	cfg["internalCertManagement"] = map[string]any{"enable": false}
	return yaml.Marshal(cfg)
}

// startJobKinds starts the controllers of the job kinds the lab file's kueue.jobKinds names.
func (u *upper) startJobKinds(ctx context.Context) error {
	if !u.file.Kueue.runsJobSet() {
		return nil
	}
	u.step("starting the JobSet controller")
	return u.startJobSet(ctx)
}

// startJobSet applies JobSet's manifests, starts its controller and waits until a JobSet
// passes its webhooks and Kueue's.
func (u *upper) startJobSet(ctx context.Context) error {
	cfg, err := u.state.RESTConfig()
	if err != nil {
		return err
	}
	ap, err := NewApplier(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dir := u.layout.ComponentDir("jobset")
	certDir := filepath.Join(dir, "certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return err
	}
	serving, err := u.pki.CA.Issue(CertSpec{CommonName: jobsetService, Server: true,
		DNSNames: []string{jobsetService + "." + jobsetNamespace + ".svc", "localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		return fmt.Errorf("JobSet's webhook certificate: %w", err)
	}
	for name, data := range map[string][]byte{"tls.crt": serving.CertPEM, "tls.key": serving.KeyPEM} {
		if err := os.WriteFile(filepath.Join(certDir, name), data, 0o600); err != nil {
			return err
		}
	}
	crds, rest, err := jobsetManifests(u.tc.JobSetConfig, u.port("jobset-webhook"), u.pki.CA.CertPEM())
	if err != nil {
		return &ComponentError{Component: "jobset", Err: fmt.Errorf("JobSet manifests in %s: %w", u.tc.JobSetConfig, err)}
	}
	apiserver := *u.state.Component("kube-apiserver")
	if err := ap.Apply(ctx, crds...); err != nil {
		return &ComponentError{Component: "jobset", Err: err}
	}
	if err := waitReady(ctx, apiserver, "serving JobSet's CRD", componentTimeout, func(ctx context.Context) error {
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
	}); err != nil {
		return err
	}
	if err := ap.Apply(ctx, rest...); err != nil {
		return &ComponentError{Component: "jobset", Err: err}
	}
	configFile := filepath.Join(dir, "config.yaml")
	jcfg, err := jobsetLabConfig(u.tc.JobSetConfig, certDir, func(name string) int { return u.port(name) })
	if err != nil {
		return err
	}
	if err := os.WriteFile(configFile, jcfg, 0o600); err != nil {
		return err
	}
	kc, err := u.componentKubeconfig("jobset", jobsetUser)
	if err != nil {
		return err
	}
	health := u.port("jobset-health")
	c, err := u.start("jobset", []string{u.tc.JobSet, "--config=" + configFile}, []string{"KUBECONFIG=" + kc},
		map[string]int{"health": health, "webhook": u.port("jobset-webhook")})
	if err != nil {
		return err
	}
	if err := waitReady(ctx, c, "ready", componentTimeout, httpGetter("http://127.0.0.1:"+strconv.Itoa(health)+"/readyz", nil, "ok")); err != nil {
		return err
	}
	// A dry-run create goes through JobSet's webhooks and Kueue's: the API server reaches
	// and trusts both.
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
		"metadata": map[string]any{"name": "gpudra-lab-webhook-probe", "namespace": "default"},
		"spec": map[string]any{"replicatedJobs": []any{map[string]any{"name": "probe", "template": map[string]any{
			"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
				"restartPolicy": "Never", "containers": []any{map[string]any{"name": "probe", "image": "busybox"}},
			}}},
		}}}},
	}}
	return waitReady(ctx, c, "answering its webhooks", componentTimeout, func(ctx context.Context) error {
		_, err := dyn.Resource(jobsetGVR).Namespace("default").Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}

package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/deployments"
)

// Kueue runs out of cluster with its own internal certificate management. The API server
// reaches its webhooks through Service kueue-webhook-service of type ExternalName pointing at
// localhost (no kube-proxy here); the certificate Kueue writes into its Secret is copied into
// its certDir, which no volume mounts out of cluster.
const (
	kueueNamespace  = "kueue-system"
	kueueService    = "kueue-webhook-service"
	kueueSecret     = "kueue-webhook-server-cert"
	kueuePrefix     = "kueue-"
	kueueConfigKind = "config.kueue.x-k8s.io/v1beta2"
)

// kueueWebhookKept says which of Kueue's webhooks the lab serves: those of Kueue's own kinds
// and of the integrations it enables (batch/Job, JobSet, PyTorchJob, TFJob, TrainJob). The pod webhook
// would intercept every Pod.
func kueueWebhookKept(path string) bool {
	return strings.Contains(path, "-kueue-x-k8s-io-") || strings.HasSuffix(path, "-batch-v1-job") ||
		strings.HasSuffix(path, "-jobset-x-k8s-io-v1alpha2-jobset") || strings.HasSuffix(path, "-kubeflow-org-v1-pytorchjob") ||
		strings.HasSuffix(path, "-kubeflow-org-v1-tfjob") || strings.HasSuffix(path, "-trainer-kubeflow-org-v1alpha1-trainjob")
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

func (u *upper) startKueue(ctx context.Context) error {
	webhookPort := u.port("kueue-webhook")
	crds, rest, err := kueueManifests(u.tc.KueueConfig, webhookPort)
	if err != nil {
		return &ComponentError{Component: "kueue", Err: fmt.Errorf("Kueue manifests in %s: %w", u.tc.KueueConfig, err)}
	}
	dyn, err := u.applyWithCRDs(ctx, "kueue", "serving Kueue's CRDs", crds, rest)
	if err != nil {
		return err
	}
	certDir, err := u.componentCertDir("kueue")
	if err != nil {
		return err
	}
	kcfg, err := u.kueueConfig(certDir)
	if err != nil {
		return err
	}
	c, err := u.startConfiguredController(ctx, "kueue", u.tc.Kueue, kueueUser, kcfg,
		map[string]int{"health": u.port("kueue-health"), "metrics": u.port("kueue-metrics"), "pprof": u.port("kueue-pprof"), "webhook": webhookPort},
		func(ctx context.Context) error { return copySecretCerts(ctx, u, kueueNamespace, kueueSecret, certDir) })
	if err != nil {
		return err
	}
	// A dry-run create goes through Kueue's webhooks.
	flavor := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
		"metadata": map[string]any{"name": "gpudra-lab-webhook-probe"},
	}}
	rf := schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "resourceflavors"}
	return waitWebhooksAnswer(ctx, c, dyn, rf, "", flavor)
}

func crdEstablished(obj *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// copySecretCerts copies the webhook certificate a controller (Kueue, JobSet) keeps in its
// Secret namespace/name into its certDir.
func copySecretCerts(ctx context.Context, u *upper, namespace, name, certDir string) error {
	sec, err := u.client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if len(sec.Data["tls.crt"]) == 0 || len(sec.Data["tls.key"]) == 0 {
		return fmt.Errorf("secret %s/%s has no certificate yet", namespace, name)
	}
	for k, v := range sec.Data {
		if err := os.WriteFile(filepath.Join(certDir, k), v, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// kueueConfig is the Configuration Kueue installs with (its
// config/components/manager/controller_manager_config.yaml: client QPS, reconciler
// concurrency) with deployments/kueue/config/kueue-config.yaml (what gpudra asks of Kueue)
// merged over it, as the file tells users to do, and the lab's own serving addresses and
// certificates.
func (u *upper) kueueConfig(certDir string) ([]byte, error) {
	return kueueLabConfig(u.tc.KueueConfig, certDir, u.file.Kueue, func(name string) int { return u.port(name) })
}

// kueueLabConfig is that Configuration, as the lab file's kueue section asks: its
// podsReadyTimeout, unless empty, replaces gpudra's waitForPodsReady timeout, and its
// wholeGPUQuota says how whole GPUs are charged (deployments.KueueConfigurationFor).
func kueueLabConfig(configDir, certDir string, spec KueueSpec, port func(string) int) ([]byte, error) {
	cfg, err := shippedConfig(configDir, "Kueue", kueueConfigKind)
	if err != nil {
		return nil, err
	}
	podsReadyTimeout := spec.podsReadyTimeout()
	ours, err := deployments.KueueConfigurationFor(spec.WholeGPUQuota)
	if err != nil {
		return nil, fmt.Errorf("deployments/kueue/config/kueue-config.yaml: %w", err)
	}
	if ours["apiVersion"] != kueueConfigKind {
		return nil, fmt.Errorf("deployments/kueue/config/kueue-config.yaml: apiVersion %v, want %s", ours["apiVersion"], kueueConfigKind)
	}
	for k, v := range ours {
		cfg[k] = v
	}
	if podsReadyTimeout != 0 {
		wait, _ := cfg["waitForPodsReady"].(map[string]any)
		if wait == nil {
			return nil, fmt.Errorf("deployments/kueue/config/kueue-config.yaml has no waitForPodsReady for the lab file's kueue.podsReadyTimeout to change")
		}
		wait["timeout"] = podsReadyTimeout.String()
	}
	cfg["namespace"] = kueueNamespace
	cfg["health"] = map[string]any{"healthProbeBindAddress": "127.0.0.1:" + strconv.Itoa(port("kueue-health"))}
	cfg["metrics"] = map[string]any{"bindAddress": "127.0.0.1:" + strconv.Itoa(port("kueue-metrics"))}
	// Profiles on loopback, for the benchmarks (`-cpuprofile`).
	cfg["pprofBindAddress"] = "127.0.0.1:" + strconv.Itoa(port("kueue-pprof"))
	cfg["webhook"] = map[string]any{"host": "127.0.0.1", "port": port("kueue-webhook"), "certDir": certDir}
	cfg["leaderElection"] = map[string]any{"leaderElect": false}
	cfg["internalCertManagement"] = map[string]any{"enable": true, "webhookServiceName": kueueService, "webhookSecretName": kueueSecret}
	// The visibility server wants a fixed /visibility folder, which a lab does not have.
	gates, _ := cfg["featureGates"].(map[string]any)
	if gates == nil {
		gates = map[string]any{}
	}
	gates["VisibilityOnDemand"] = false
	cfg["featureGates"] = gates
	return yaml.Marshal(cfg)
}

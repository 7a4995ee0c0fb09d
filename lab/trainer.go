package lab

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kubeflow Trainer runs out of cluster under the lab's main (trainer_main.go): its webhook
// server on 127.0.0.1 with a certificate the lab's CA issues, the API server reaching it
// through an ExternalName Service pointing at localhost, in namespace kubeflow-system as its
// manifests install it. A TrainJob runs as a JobSet, so the lab starts Trainer after the
// JobSet controller.
const (
	trainerNamespace = "kubeflow-system"
	trainerService   = "kubeflow-trainer-controller-manager"
	trainerUser      = "system:serviceaccount:" + trainerNamespace + ":kubeflow-trainer-controller-manager"
	// trainerRuntime is the ClusterTrainingRuntime the lab applies (manifests/base/runtimes):
	// one replicated job "node" of numNodes pods, the TrainJob's trainer.
	trainerRuntime     = "torch-distributed"
	trainerRuntimeFile = "runtimes/torch_distributed.yaml"
)

var trainJobGVR = schema.GroupVersionResource{Group: "trainer.kubeflow.org", Version: "v1alpha1", Resource: "trainjobs"}

// trainerManifests renders what Trainer's manifests/base would install, for the lab: the
// TrainJob, TrainingRuntime and ClusterTrainingRuntime CRDs, the namespace, RBAC, an
// ExternalName webhook Service pointing at localhost and the webhook configurations trusting
// caBundle, named as manifests/base/webhook's patches name them. runtimes are the
// ClusterTrainingRuntimes to apply once Trainer's webhooks answer (they validate them).
func trainerManifests(configDir string, webhookPort int, caBundle []byte) (crds, rest, runtimes []*unstructured.Unstructured, err error) {
	read := manifestReader(configDir)
	for _, r := range []string{"trainjobs", "trainingruntimes", "clustertrainingruntimes"} {
		crd, err := read("crds/trainer.kubeflow.org_" + r + ".yaml")
		if err != nil {
			return nil, nil, nil, err
		}
		crds = append(crds, crd...)
	}
	k := kustomization{namespace: trainerNamespace}
	if rest, err = kustomizedObjects(read, k, "rbac/service_account.yaml", "rbac/role.yaml", "rbac/role_binding.yaml"); err != nil {
		return nil, nil, nil, err
	}
	rest = append(rest, localhostWebhookService(trainerNamespace, trainerService, webhookPort))
	hooks, err := read("webhook/manifests.yaml")
	if err != nil {
		return nil, nil, nil, err
	}
	names := map[string]string{"MutatingWebhookConfiguration": "defaulter.trainer.kubeflow.org", "ValidatingWebhookConfiguration": "validator.trainer.kubeflow.org"}
	for _, o := range hooks {
		name, ok := names[o.GetKind()]
		if !ok {
			return nil, nil, nil, fmt.Errorf("webhook/manifests.yaml: unexpected %s %s", o.GetKind(), o.GetName())
		}
		o.SetName(name)
		list, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		for _, w := range list {
			m, _ := w.(map[string]any)
			path, _, _ := unstructured.NestedString(m, "clientConfig", "service", "path")
			_ = unstructured.SetNestedField(m, map[string]any{"namespace": trainerNamespace, "name": trainerService, "path": path, "port": int64(webhookPort)}, "clientConfig", "service")
			_ = unstructured.SetNestedField(m, base64.StdEncoding.EncodeToString(caBundle), "clientConfig", "caBundle")
		}
		_ = unstructured.SetNestedSlice(o.Object, list, "webhooks")
		rest = append(rest, o)
	}
	if runtimes, err = read(trainerRuntimeFile); err != nil {
		return nil, nil, nil, err
	}
	if len(runtimes) != 1 || runtimes[0].GetKind() != "ClusterTrainingRuntime" || runtimes[0].GetName() != trainerRuntime {
		return nil, nil, nil, fmt.Errorf("%s: want the one ClusterTrainingRuntime %s", trainerRuntimeFile, trainerRuntime)
	}
	return crds, rest, runtimes, nil
}

// trainJobProbe is a TrainJob of the lab's runtime that a dry-run create sends through
// Trainer's webhooks and Kueue's.
func trainJobProbe() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
		"metadata": map[string]any{"name": "gpudra-lab-webhook-probe", "namespace": "default"},
		"spec": map[string]any{
			"runtimeRef": map[string]any{"name": trainerRuntime},
			"trainer":    map[string]any{"numNodes": int64(1), "image": "busybox"},
		},
	}}
}

// startTrainer applies Trainer's manifests, starts it, applies the lab's runtime and waits
// until a TrainJob passes Trainer's webhooks and Kueue's.
func (u *upper) startTrainer(ctx context.Context) error {
	certDir, err := u.webhookServingCert("trainer", trainerNamespace, trainerService)
	if err != nil {
		return err
	}
	webhookPort, healthPort := u.port("trainer-webhook"), u.port("trainer-health")
	crds, rest, runtimes, err := trainerManifests(u.tc.TrainerConfig, webhookPort, u.pki.CA.CertPEM())
	if err != nil {
		return &ComponentError{Component: "trainer", Err: fmt.Errorf("Trainer's manifests in %s: %w", u.tc.TrainerConfig, err)}
	}
	dyn, err := u.applyWithCRDs(ctx, "trainer", "serving Trainer's CRDs", crds, rest)
	if err != nil {
		return err
	}
	kc, err := u.componentKubeconfig("trainer", trainerUser)
	if err != nil {
		return err
	}
	c, err := u.start("trainer", []string{u.tc.Trainer,
		"--webhook-port=" + strconv.Itoa(webhookPort), "--cert-dir=" + certDir,
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(healthPort)},
		[]string{"KUBECONFIG=" + kc}, map[string]int{"health": healthPort, "webhook": webhookPort})
	if err != nil {
		return err
	}
	if err := waitReady(ctx, c, "ready", componentTimeout, httpGetter("http://127.0.0.1:"+strconv.Itoa(healthPort)+"/readyz", nil, "ok")); err != nil {
		return err
	}
	cfg, err := u.state.RESTConfig()
	if err != nil {
		return err
	}
	ap, err := NewApplier(cfg)
	if err != nil {
		return err
	}
	// Trainer's webhook validates the runtime: applied once the API server reaches it.
	if err := waitReady(ctx, c, "accepting runtime "+trainerRuntime, componentTimeout, func(ctx context.Context) error {
		return ap.Apply(ctx, runtimes...)
	}); err != nil {
		return err
	}
	return waitWebhooksAnswer(ctx, c, dyn, trainJobGVR, "default", trainJobProbe())
}

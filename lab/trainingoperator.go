package lab

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The Kubeflow training operator runs out of cluster under the lab's main
// (trainingoperator_main.go): its webhook server on 127.0.0.1 with a certificate the lab's
// CA issues, the API server reaching it through an ExternalName Service pointing at
// localhost. It runs the controllers of the kinds the lab file names (PyTorchJob, TFJob: the
// kinds Kueue's configuration integrates) in namespace kubeflow, as its standalone install
// does.
const (
	trainingOperatorNamespace = "kubeflow"
	trainingOperatorService   = "training-operator"
	trainingOperatorUser      = "system:serviceaccount:" + trainingOperatorNamespace + ":training-operator"
)

// kubeflowResource is the resource of a training operator kind (PyTorchJob: pytorchjobs).
func kubeflowResource(kind string) string { return strings.ToLower(kind) + "s" }

// trainingOperatorManifests renders what the operator's manifests/base would install for
// the kinds the lab runs: their CRDs, the namespace, RBAC, an ExternalName webhook Service
// pointing at localhost and the validating webhooks of those kinds trusting caBundle.
func trainingOperatorManifests(configDir string, kinds []string, webhookPort int, caBundle []byte) (crds, rest []*unstructured.Unstructured, err error) {
	read := manifestReader(configDir)
	for _, kind := range kinds {
		crd, err := read("crds/kubeflow.org_" + kubeflowResource(kind) + ".yaml")
		if err != nil {
			return nil, nil, err
		}
		crds = append(crds, crd...)
	}
	k := kustomization{namespace: trainingOperatorNamespace}
	if rest, err = kustomizedObjects(read, k, "rbac/service-account.yaml", "rbac/role.yaml", "rbac/cluster-role-binding.yaml"); err != nil {
		return nil, nil, err
	}
	rest = append(rest, localhostWebhookService(trainingOperatorNamespace, trainingOperatorService, webhookPort))
	hooks, err := read("webhook/manifests.yaml")
	if err != nil {
		return nil, nil, err
	}
	for _, o := range hooks {
		// manifests/base/webhook/patch.yaml's name; the operator's webhook server does not
		// look it up (the lab's main does not rotate certificates).
		o.SetName("validator.training-operator.kubeflow.org")
		list, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		var kept []any
		for _, w := range list {
			m, _ := w.(map[string]any)
			path, _, _ := unstructured.NestedString(m, "clientConfig", "service", "path")
			if !slices.ContainsFunc(kinds, func(kind string) bool { return strings.HasSuffix(path, "-kubeflow-org-v1-"+strings.ToLower(kind)) }) {
				continue
			}
			_ = unstructured.SetNestedField(m, map[string]any{"namespace": trainingOperatorNamespace, "name": trainingOperatorService, "path": path, "port": int64(webhookPort)}, "clientConfig", "service")
			_ = unstructured.SetNestedField(m, base64.StdEncoding.EncodeToString(caBundle), "clientConfig", "caBundle")
			kept = append(kept, m)
		}
		if len(kept) != len(kinds) {
			return nil, nil, fmt.Errorf("webhook/manifests.yaml has %d webhooks for %s", len(kept), strings.Join(kinds, ", "))
		}
		_ = unstructured.SetNestedSlice(o.Object, kept, "webhooks")
		rest = append(rest, o)
	}
	return crds, rest, nil
}

// startTrainingOperator applies the operator's manifests for kinds, starts it and waits
// until a job of each kind passes its webhook and Kueue's.
func (u *upper) startTrainingOperator(ctx context.Context, kinds []string) error {
	certDir, err := u.webhookServingCert("training-operator", trainingOperatorNamespace, trainingOperatorService)
	if err != nil {
		return err
	}
	webhookPort, healthPort := u.port("training-operator-webhook"), u.port("training-operator-health")
	crds, rest, err := trainingOperatorManifests(u.tc.TrainingOperatorConfig, kinds, webhookPort, u.pki.CA.CertPEM())
	if err != nil {
		return &ComponentError{Component: "training-operator", Err: fmt.Errorf("the training operator's manifests in %s: %w", u.tc.TrainingOperatorConfig, err)}
	}
	dyn, err := u.applyWithCRDs(ctx, "training-operator", "serving the CRDs of "+strings.Join(kinds, ", "), crds, rest)
	if err != nil {
		return err
	}
	kc, err := u.componentKubeconfig("training-operator", trainingOperatorUser)
	if err != nil {
		return err
	}
	c, err := u.start("training-operator", []string{u.tc.TrainingOperator,
		"--kinds=" + strings.Join(kinds, ","), "--webhook-port=" + strconv.Itoa(webhookPort), "--cert-dir=" + certDir,
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(healthPort)},
		[]string{"KUBECONFIG=" + kc}, map[string]int{"health": healthPort, "webhook": webhookPort})
	if err != nil {
		return err
	}
	if err := waitReady(ctx, c, "ready", componentTimeout, httpGetter("http://127.0.0.1:"+strconv.Itoa(healthPort)+"/readyz", nil, "ok")); err != nil {
		return err
	}
	// A dry-run create of each kind goes through the operator's webhook and Kueue's.
	for _, kind := range kinds {
		replicas := map[string]string{"PyTorchJob": "pytorchReplicaSpecs", "TFJob": "tfReplicaSpecs"}[kind]
		container := map[string]string{"PyTorchJob": "pytorch", "TFJob": "tensorflow"}[kind]
		probe := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "kubeflow.org/v1", "kind": kind,
			"metadata": map[string]any{"name": "gpudra-lab-webhook-probe", "namespace": "default"},
			"spec": map[string]any{replicas: map[string]any{"Worker": map[string]any{"replicas": int64(1),
				"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": container, "image": "busybox"}}}},
			}}},
		}}
		gvr := schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: kubeflowResource(kind)}
		if err := waitWebhooksAnswer(ctx, c, dyn, gvr, "default", probe); err != nil {
			return err
		}
	}
	return nil
}

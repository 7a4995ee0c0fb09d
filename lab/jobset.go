package lab

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
	read := manifestReader(configDir)
	if crds, err = read("crd/bases/jobset.x-k8s.io_jobsets.yaml"); err != nil {
		return nil, nil, err
	}
	k := kustomization{prefix: jobsetPrefix, namespace: jobsetNamespace}
	if rest, err = kustomizedObjects(read, k, "rbac/service_account.yaml", "rbac/role.yaml", "rbac/role_binding.yaml",
		"rbac/manager_secrets_role.yaml", "rbac/manager_secrets_role_binding.yaml"); err != nil {
		return nil, nil, err
	}
	rest = append(rest, localhostWebhookService(jobsetNamespace, jobsetService, webhookPort))
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
	cfg, err := shippedConfig(configDir, "JobSet", jobsetConfigKind)
	if err != nil {
		return nil, err
	}
	cfg["health"] = map[string]any{"healthProbeBindAddress": "127.0.0.1:" + strconv.Itoa(port("jobset-health"))}
	cfg["metrics"] = map[string]any{"bindAddress": "0"}
	cfg["webhook"] = map[string]any{"host": "127.0.0.1", "port": port("jobset-webhook"), "certDir": certDir}
	cfg["leaderElection"] = map[string]any{"leaderElect": false}
	cfg["internalCertManagement"] = map[string]any{"enable": false}
	return yaml.Marshal(cfg)
}

// serveJobKindCRDs serves the CRDs of the job kinds the lab runs, before Kueue starts.
// Kueue sets up its integration of a kind whose CRD is not served yet later, polling for it
// with a backoff that grows to 2 minutes, and until then its webhook refuses the kind's jobs
// (a TrainJob as of an "unsupported runtime"); served first, every integration is set up
// as Kueue starts.
func (u *upper) serveJobKindCRDs(ctx context.Context) error {
	k, ca := u.file.Kueue, u.pki.CA.CertPEM()
	var crds []*unstructured.Unstructured
	var kinds []string
	if k.runsJobSet() {
		c, _, err := jobsetManifests(u.tc.JobSetConfig, u.port("jobset-webhook"), ca)
		if err != nil {
			return &ComponentError{Component: "jobset", Err: fmt.Errorf("JobSet manifests in %s: %w", u.tc.JobSetConfig, err)}
		}
		crds, kinds = append(crds, c...), append(kinds, "JobSet")
	}
	if k.runsTrainingOperator() {
		c, _, err := trainingOperatorManifests(u.tc.TrainingOperatorConfig, k.kubeflowKinds(), u.port("training-operator-webhook"), ca)
		if err != nil {
			return &ComponentError{Component: "training-operator", Err: fmt.Errorf("the training operator's manifests in %s: %w", u.tc.TrainingOperatorConfig, err)}
		}
		crds, kinds = append(crds, c...), append(kinds, k.kubeflowKinds()...)
	}
	if k.runsTrainer() {
		c, _, _, err := trainerManifests(u.tc.TrainerConfig, u.port("trainer-webhook"), ca)
		if err != nil {
			return &ComponentError{Component: "trainer", Err: fmt.Errorf("Trainer's manifests in %s: %w", u.tc.TrainerConfig, err)}
		}
		crds, kinds = append(crds, c...), append(kinds, "TrainJob")
	}
	if len(crds) == 0 {
		return nil
	}
	u.step("serving the CRDs of %s for Kueue", strings.Join(kinds, ", "))
	ap, dyn, err := u.clients()
	if err != nil {
		return err
	}
	return serveCRDs(ctx, ap, dyn, *u.state.Component("kube-apiserver"), "kueue", "serving the job kinds' CRDs", crds)
}

// startJobKinds starts the controllers of the job kinds the lab file's kueue.jobKinds names.
func (u *upper) startJobKinds(ctx context.Context) error {
	if u.file.Kueue.runsJobSet() {
		u.step("starting the JobSet controller")
		if err := u.startJobSet(ctx); err != nil {
			return err
		}
	}
	if u.file.Kueue.runsTrainingOperator() {
		kinds := u.file.Kueue.kubeflowKinds()
		u.step("starting the Kubeflow training operator (%s)", strings.Join(kinds, ", "))
		if err := u.startTrainingOperator(ctx, kinds); err != nil {
			return err
		}
	}
	if u.file.Kueue.runsTrainer() {
		u.step("starting Kubeflow Trainer (TrainJob, runtime %s)", trainerRuntime)
		return u.startTrainer(ctx)
	}
	return nil
}

// startJobSet applies JobSet's manifests, starts its controller and waits until a JobSet
// passes its webhooks and Kueue's.
func (u *upper) startJobSet(ctx context.Context) error {
	certDir, err := u.webhookServingCert("jobset", jobsetNamespace, jobsetService)
	if err != nil {
		return err
	}
	crds, rest, err := jobsetManifests(u.tc.JobSetConfig, u.port("jobset-webhook"), u.pki.CA.CertPEM())
	if err != nil {
		return &ComponentError{Component: "jobset", Err: fmt.Errorf("JobSet manifests in %s: %w", u.tc.JobSetConfig, err)}
	}
	dyn, err := u.applyWithCRDs(ctx, "jobset", "serving JobSet's CRD", crds, rest)
	if err != nil {
		return err
	}
	jcfg, err := jobsetLabConfig(u.tc.JobSetConfig, certDir, func(name string) int { return u.port(name) })
	if err != nil {
		return err
	}
	c, err := u.startConfiguredController(ctx, "jobset", u.tc.JobSet, jobsetUser, jcfg,
		map[string]int{"health": u.port("jobset-health"), "webhook": u.port("jobset-webhook")}, nil)
	if err != nil {
		return err
	}
	// A dry-run create goes through JobSet's webhooks and Kueue's.
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
		"metadata": map[string]any{"name": "gpudra-lab-webhook-probe", "namespace": "default"},
		"spec": map[string]any{"replicatedJobs": []any{map[string]any{"name": "probe", "template": map[string]any{
			"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
				"restartPolicy": "Never", "containers": []any{map[string]any{"name": "probe", "image": "busybox"}},
			}}},
		}}}},
	}}
	return waitWebhooksAnswer(ctx, c, dyn, jobsetGVR, "default", probe)
}

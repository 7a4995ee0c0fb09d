package lab

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// kueueConfigDir finds Kueue's config/components: in the toolchain cache, else in the Go module cache.
func kueueConfigDir(t *testing.T) string {
	t.Helper()
	if out, err := runToolchain(t.Context(), os.Stderr, "--dir", "kueue"); err == nil {
		if d := filepath.Join(strings.TrimSpace(out), "config"); dirExists(d) {
			return d
		}
	}
	if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
		if d := filepath.Join(strings.TrimSpace(string(out)), "sigs.k8s.io", "kueue@v0.19.2", "config", "components"); dirExists(d) {
			return d
		}
	}
	lacking(t, "Kueue v0.19.2 manifests are neither in the toolchain cache nor in the Go module cache: run make toolchain (or go mod download sigs.k8s.io/kueue)")
	return ""
}

func dirExists(d string) bool { st, err := os.Stat(d); return err == nil && st.IsDir() }

func TestKueueManifestsServeOnlyWhatTheLabRuns(t *testing.T) {
	crds, rest, err := kueueManifests(kueueConfigDir(t), 12345)
	if err != nil {
		t.Fatal(err)
	}
	conversion := 0
	for _, c := range crds {
		if s, _, _ := unstructured.NestedString(c.Object, "spec", "conversion", "webhook", "clientConfig", "service", "name"); s != "" {
			conversion++
			port, _, _ := unstructured.NestedInt64(c.Object, "spec", "conversion", "webhook", "clientConfig", "service", "port")
			if s != kueueService || port != 12345 {
				t.Errorf("CRD %s converts through %s:%d, want %s:12345", c.GetName(), s, port, kueueService)
			}
		}
	}
	if len(crds) < 10 || conversion == 0 {
		t.Fatalf("%d CRDs, %d with conversion webhooks; want Kueue's CRDs with their conversion webhooks", len(crds), conversion)
	}
	kinds := map[string]*unstructured.Unstructured{}
	for _, o := range rest {
		kinds[o.GetKind()+"/"+o.GetName()] = o
	}
	for _, want := range []string{"ClusterRole/kueue-manager-role", "ClusterRoleBinding/kueue-manager-rolebinding",
		"ServiceAccount/kueue-controller-manager", "Secret/" + kueueSecret, "Service/" + kueueService,
		"MutatingWebhookConfiguration/kueue-mutating-webhook-configuration",
		"ValidatingWebhookConfiguration/kueue-validating-webhook-configuration"} {
		if kinds[want] == nil {
			t.Errorf("missing %s", want)
		}
	}
	binding := kinds["ClusterRoleBinding/kueue-manager-rolebinding"]
	subjects, _, _ := unstructured.NestedSlice(binding.Object, "subjects")
	if s := subjects[0].(map[string]any); s["name"] != "kueue-controller-manager" || s["namespace"] != kueueNamespace {
		t.Errorf("binding subject %v, want the kueue-system/kueue-controller-manager service account (the lab's Kueue identity)", s)
	}
	if "system:serviceaccount:"+kueueNamespace+":kueue-controller-manager" != kueueUser {
		t.Errorf("Kueue's client certificate user %s does not match its RBAC subject", kueueUser)
	}
	// Kueue updates only its own webhook configurations, by their prefixed names.
	rules, _, _ := unstructured.NestedSlice(kinds["ClusterRole/kueue-manager-role"].Object, "rules")
	mayUpdate := map[string]bool{}
	for _, r := range rules {
		m := r.(map[string]any)
		names, _ := m["resourceNames"].([]any)
		for _, n := range names {
			mayUpdate[fmt.Sprint(n)] = true
		}
	}
	for _, name := range []string{"kueue-mutating-webhook-configuration", "kueue-validating-webhook-configuration"} {
		if !mayUpdate[name] {
			t.Errorf("ClusterRole kueue-manager-role names no %s: Kueue could not put its certificate in it (resourceNames %v)", name, mayUpdate)
		}
	}
	sawJob, sawJobSet, sawPyTorchJob, sawTFJob, sawTrainJob := false, false, false, false, false
	for _, k := range []string{"MutatingWebhookConfiguration/kueue-mutating-webhook-configuration", "ValidatingWebhookConfiguration/kueue-validating-webhook-configuration"} {
		hooks, _, _ := unstructured.NestedSlice(kinds[k].Object, "webhooks")
		for _, h := range hooks {
			path, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "service", "path")
			otherKubeflow := strings.Contains(path, "kubeflow-org") && !strings.HasSuffix(path, "-kubeflow-org-v1-pytorchjob") &&
				!strings.HasSuffix(path, "-kubeflow-org-v1-tfjob") && !strings.HasSuffix(path, "-trainer-kubeflow-org-v1alpha1-trainjob")
			if strings.HasSuffix(path, "-pod") || strings.Contains(path, "deployment") || otherKubeflow {
				t.Errorf("%s keeps webhook %s, which the lab does not serve", k, path)
			}
			sawJob = sawJob || strings.HasSuffix(path, "batch-v1-job")
			sawJobSet = sawJobSet || strings.HasSuffix(path, "jobset-x-k8s-io-v1alpha2-jobset")
			sawPyTorchJob = sawPyTorchJob || strings.HasSuffix(path, "kubeflow-org-v1-pytorchjob")
			sawTFJob = sawTFJob || strings.HasSuffix(path, "kubeflow-org-v1-tfjob")
			sawTrainJob = sawTrainJob || strings.HasSuffix(path, "trainer-kubeflow-org-v1alpha1-trainjob")
		}
	}
	if !sawJob {
		t.Error("the batch/v1 Job webhooks are missing; Kueue would not suspend Jobs")
	}
	if !sawJobSet {
		t.Error("the JobSet webhooks are missing; Kueue would not suspend JobSets")
	}
	if !sawPyTorchJob {
		t.Error("the PyTorchJob webhooks are missing; Kueue would not suspend PyTorchJobs")
	}
	if !sawTFJob {
		t.Error("the TFJob webhooks are missing; Kueue would not suspend TFJobs")
	}
	if !sawTrainJob {
		t.Error("the TrainJob webhooks are missing; Kueue would not suspend TrainJobs")
	}
}

// The lab runs Kueue as a user installs it: Kueue's shipped Configuration (client QPS 300)
// with gpudra's fields merged over it and the lab's addresses.
func TestKueueLabConfigIsTheShippedOneWithGpudrasFields(t *testing.T) {
	data, err := kueueLabConfig(kueueConfigDir(t), "/certs", KueueSpec{Enabled: true}, func(name string) int {
		return map[string]int{"kueue-health": 1, "kueue-metrics": 2, "kueue-webhook": 3}[name]
	})
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ClientConnection struct{ QPS, Burst float64 } `json:"clientConnection"`
		Controller       struct {
			GroupKindConcurrency map[string]int `json:"groupKindConcurrency"`
		} `json:"controller"`
		Resources struct {
			DeviceClassMappings []struct{ Name string } `json:"deviceClassMappings"`
		} `json:"resources"`
		WaitForPodsReady struct{ Timeout string } `json:"waitForPodsReady"`
		FairSharing      struct {
			PreemptionStrategies []string `json:"preemptionStrategies"`
		} `json:"fairSharing"`
		Webhook struct {
			Host string
			Port int
		} `json:"webhook"`
		FeatureGates map[string]bool `json:"featureGates"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.ClientConnection.QPS != 300 || cfg.ClientConnection.Burst != 500 {
		t.Errorf("clientConnection = %+v, want Kueue v0.19.2's shipped qps 300 burst 500", cfg.ClientConnection)
	}
	// gpudra's file raises the Workload reconcilers (admission checks add Workload writes)
	// and keeps Kueue's shipped values for the other kinds.
	if got := cfg.Controller.GroupKindConcurrency; got["Workload.kueue.x-k8s.io"] != 20 || got["Job.batch"] != 5 || got["ClusterQueue.kueue.x-k8s.io"] != 5 {
		t.Errorf("groupKindConcurrency = %v, want gpudra's 20 Workload reconcilers and Kueue's shipped values for the rest", got)
	}
	if len(cfg.Resources.DeviceClassMappings) == 0 || cfg.WaitForPodsReady.Timeout != "5m" {
		t.Errorf("gpudra's fields missing: resources %+v, waitForPodsReady %+v", cfg.Resources, cfg.WaitForPodsReady)
	}
	if len(cfg.FairSharing.PreemptionStrategies) == 0 {
		t.Error("the lab's Kueue runs without fair sharing between a cohort's ClusterQueues")
	}
	if cfg.Webhook.Host != "127.0.0.1" || cfg.Webhook.Port != 3 {
		t.Errorf("webhook = %+v, want the lab's 127.0.0.1:3", cfg.Webhook)
	}
	if !cfg.FeatureGates["KueueDRAIntegrationConsumableCapacity"] || cfg.FeatureGates["VisibilityOnDemand"] {
		t.Errorf("featureGates = %v", cfg.FeatureGates)
	}
}

// kueueLabFile is a one-node lab file with the given kueue section.
func kueueLabFile(kueue string) []byte {
	return []byte("apiVersion: lab.gpudra.dev/v1alpha1\nkind: Lab\nkueue: " + kueue + "\n" +
		"blocks: [{name: a, racks: [{name: r, nodes: [{name: n1, profile: p}]}]}]\n")
}

// kueueConfigOf is the Configuration the lab's Kueue runs with for a lab file with the
// given kueue section.
func kueueConfigOf(t *testing.T, kueue string) []byte {
	t.Helper()
	f, err := ParseFile(kueueLabFile(kueue))
	if err != nil {
		t.Fatal(err)
	}
	data, err := kueueLabConfig(kueueConfigDir(t), "/certs", f.Kueue, func(string) int { return 1 })
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// The lab file's kueue.podsReadyTimeout replaces only the timeout of gpudra's
// waitForPodsReady: eviction stays on, with the shipped back-off.
func TestKueueLabConfigTakesTheLabFilesPodsReadyTimeout(t *testing.T) {
	data := kueueConfigOf(t, "{enabled: true, podsReadyTimeout: 45s}")
	var cfg struct {
		WaitForPodsReady struct {
			Timeout           string `json:"timeout"`
			BlockAdmission    *bool  `json:"blockAdmission"`
			RequeuingStrategy struct {
				Timestamp          string `json:"timestamp"`
				BackoffBaseSeconds int    `json:"backoffBaseSeconds"`
				BackoffLimitCount  int    `json:"backoffLimitCount"`
			} `json:"requeuingStrategy"`
		} `json:"waitForPodsReady"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	w := cfg.WaitForPodsReady
	if d, err := time.ParseDuration(w.Timeout); err != nil || d != 45*time.Second {
		t.Errorf("waitForPodsReady.timeout = %q, want the lab file's 45s", w.Timeout)
	}
	if w.BlockAdmission == nil || *w.BlockAdmission || w.RequeuingStrategy.Timestamp != "Eviction" ||
		w.RequeuingStrategy.BackoffBaseSeconds != 30 || w.RequeuingStrategy.BackoffLimitCount != 5 {
		t.Errorf("waitForPodsReady = %+v, want the rest of gpudra's values (no blocking, requeued from eviction, back-off 30s, 5 times)", w)
	}
}

// The lab file's kueue.wholeGPUQuota: count runs the lab's Kueue with whole GPUs charged
// one gpudra.dev/gpu each, and every other class in GPU percent as shipped.
func TestKueueLabConfigChargesWholeGPUsByCount(t *testing.T) {
	data := kueueConfigOf(t, "{enabled: true, wholeGPUQuota: count}")
	var cfg struct {
		Resources struct {
			DeviceClassMappings []struct {
				Name             string
				DeviceClassNames []string `json:"deviceClassNames"`
				Sources          []any
			} `json:"deviceClassMappings"`
		} `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	charged := map[string]string{}
	for _, m := range cfg.Resources.DeviceClassMappings {
		for _, c := range m.DeviceClassNames {
			charged[c] = fmt.Sprintf("%s (%d sources)", m.Name, len(m.Sources))
		}
	}
	want := map[string]string{
		api.DeviceClassGPU:   api.QuotaGPU + " (0 sources)",
		api.DeviceClassShare: api.QuotaGPUPercent + " (1 sources)",
	}
	for class, w := range want {
		if charged[class] != w {
			t.Errorf("%s is charged to %q, want %q", class, charged[class], w)
		}
	}
}

func TestLabFileRefusesAnUnknownWholeGPUQuota(t *testing.T) {
	for _, c := range []struct{ kueue, want string }{
		{"{enabled: true, wholeGPUQuota: gpus}", `kueue.wholeGPUQuota: Unsupported value: "gpus": supported values: "percent", "count"`},
		{"{wholeGPUQuota: count}", "kueue.wholeGPUQuota: Invalid value: \"count\": needs kueue.enabled: true"},
	} {
		_, err := ParseFile(kueueLabFile(c.kueue))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("kueue %s: err = %v, want one containing %s", c.kueue, err, c.want)
		}
	}
}

package deployments_test

import (
	"bufio"
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	kueueconfig "sigs.k8s.io/kueue/apis/config/v1beta2"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/deployments"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// TestSamplesDecodeStrictly reads every sample users apply and decodes it into its real
// API type with unknown fields rejected, so a typo in a sample fails here, not in a cluster.
func TestSamplesDecodeStrictly(t *testing.T) {
	kinds := map[string]func() any{
		"AdmissionCheck":                   func() any { return &kueue.AdmissionCheck{} },
		"ResourceFlavor":                   func() any { return &kueue.ResourceFlavor{} },
		"ClusterQueue":                     func() any { return &kueue.ClusterQueue{} },
		"LocalQueue":                       func() any { return &kueue.LocalQueue{} },
		"WorkloadPriorityClass":            func() any { return &kueue.WorkloadPriorityClass{} },
		"PriorityClass":                    func() any { return &schedulingv1.PriorityClass{} },
		"Namespace":                        func() any { return &corev1.Namespace{} },
		"ResourceClaimTemplate":            func() any { return &resourceapi.ResourceClaimTemplate{} },
		"ResourceClaim":                    func() any { return &resourceapi.ResourceClaim{} },
		"DeviceClass":                      func() any { return &resourceapi.DeviceClass{} },
		"Job":                              func() any { return &batchv1.Job{} },
		"Pod":                              func() any { return &corev1.Pod{} },
		"ServiceAccount":                   func() any { return &corev1.ServiceAccount{} },
		"ClusterRole":                      func() any { return &rbacv1.ClusterRole{} },
		"ClusterRoleBinding":               func() any { return &rbacv1.ClusterRoleBinding{} },
		"ValidatingAdmissionPolicy":        func() any { return &admissionv1.ValidatingAdmissionPolicy{} },
		"ValidatingWebhookConfiguration":   func() any { return &admissionv1.ValidatingWebhookConfiguration{} },
		"MutatingWebhookConfiguration":     func() any { return &admissionv1.MutatingWebhookConfiguration{} },
		"ValidatingAdmissionPolicyBinding": func() any { return &admissionv1.ValidatingAdmissionPolicyBinding{} },
		"JobSet":                           func() any { return &jobSet{} },
		"PyTorchJob":                       func() any { return &pyTorchJob{} },
		"TrainJob":                         func() any { return &trainJob{} },
	}
	files, _ := filepath.Glob("*/*.yaml")
	if len(files) == 0 {
		t.Fatal("no samples found")
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := yaml.NewYAMLReader(bufioReader(data))
		for {
			doc, err := r.Read()
			if err != nil {
				break
			}
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			var meta struct{ Kind string }
			if err := sigsyaml.Unmarshal(doc, &meta); err != nil {
				t.Errorf("%s: %v", f, err)
				continue
			}
			newObj, ok := kinds[meta.Kind]
			if !ok {
				continue // kinds owned by other tools (lab files, profiles)
			}
			if err := sigsyaml.UnmarshalStrict(doc, newObj()); err != nil {
				t.Errorf("%s: %s: %v", f, meta.Kind, err)
			}
		}
	}
}

// jobSet is the part of a JobSet (jobset.x-k8s.io/v1alpha2) the samples use, each replicated
// job's template a real batch/v1 JobTemplateSpec; a field outside it fails the strict decode.
type jobSet struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Suspend        bool `json:"suspend"`
		ReplicatedJobs []struct {
			Name     string                  `json:"name"`
			Replicas int32                   `json:"replicas"`
			Template batchv1.JobTemplateSpec `json:"template"`
		} `json:"replicatedJobs"`
	} `json:"spec"`
}

// pyTorchJob is the part of a PyTorchJob (kubeflow.org/v1) the samples use, each replica
// type's template a real PodTemplateSpec; a field outside it fails the strict decode.
type pyTorchJob struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		RunPolicy struct {
			Suspend bool `json:"suspend"`
		} `json:"runPolicy"`
		PyTorchReplicaSpecs map[string]struct {
			Replicas      int32                  `json:"replicas"`
			RestartPolicy string                 `json:"restartPolicy"`
			Template      corev1.PodTemplateSpec `json:"template"`
		} `json:"pytorchReplicaSpecs"`
	} `json:"spec"`
}

// trainJob is the part of a TrainJob (trainer.kubeflow.org/v1alpha1) the samples use: the
// trainer's fields and runtime patches of a replicated job's pod template, whose metadata and
// scheduling fields are real API types; a field outside it fails the strict decode.
type trainJob struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Suspend    bool `json:"suspend"`
		RuntimeRef struct {
			Name string `json:"name"`
		} `json:"runtimeRef"`
		Trainer struct {
			NumNodes         int32                       `json:"numNodes"`
			Image            string                      `json:"image"`
			Command          []string                    `json:"command"`
			ResourcesPerNode corev1.ResourceRequirements `json:"resourcesPerNode"`
		} `json:"trainer"`
		RuntimePatches []struct {
			Manager             string `json:"manager"`
			TrainingRuntimeSpec struct {
				Template struct {
					Spec struct {
						ReplicatedJobs []struct {
							Name     string `json:"name"`
							Template struct {
								Spec struct {
									Template struct {
										Metadata metav1.ObjectMeta `json:"metadata"`
										Spec     struct {
											NodeSelector    map[string]string          `json:"nodeSelector"`
											SchedulingGates []corev1.PodSchedulingGate `json:"schedulingGates"`
										} `json:"spec"`
									} `json:"template"`
								} `json:"spec"`
							} `json:"template"`
						} `json:"replicatedJobs"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"trainingRuntimeSpec"`
		} `json:"runtimePatches"`
	} `json:"spec"`
}

func bufioReader(data []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(data)) }

// notQueued are the DeviceClasses Kueue's configuration does not map, since a mapping holds at
// most 8 classes: a queued Workload whose claim template names one is refused by Kueue
// (docs/queueing.md#vendors says which classes to use instead).
var notQueued = map[string]bool{
	"xgmi-group.gpudra.dev": true, "gpu-group.gpudra.dev": true,
	"gpu-group-2.gpudra.dev": true, "gpu-group-4.gpudra.dev": true, "gpu-group-8.gpudra.dev": true,
}

// TestKueueConfiguration: the Kueue configuration sample decodes strictly into Kueue's own
// Configuration type, maps every gpudra DeviceClass to a logical resource quotas can name,
// turns on waitForPodsReady (all-or-nothing start, with requeue) and fair sharing, and
// integrates the job kinds gpudra plans (batch/v1 Job, JobSet, PyTorchJob, TrainJob).
func TestKueueConfiguration(t *testing.T) {
	var cfg kueueconfig.Configuration
	if err := sigsyaml.UnmarshalStrict(deployments.KueueConfiguration, &cfg); err != nil {
		t.Fatalf("kueue/config/kueue-config.yaml: %v", err)
	}
	for _, fw := range []string{"batch/job", "jobset.x-k8s.io/jobset", "kubeflow.org/pytorchjob", "trainer.kubeflow.org/trainjob"} {
		if cfg.Integrations == nil || !slices.Contains(cfg.Integrations.Frameworks, fw) {
			t.Errorf("integrations.frameworks lacks %s: Kueue would not queue that job kind", fw)
		}
	}
	mapped := map[string]string{}
	if cfg.Resources != nil {
		for _, m := range cfg.Resources.DeviceClassMappings {
			for _, c := range m.DeviceClassNames {
				mapped[string(c)] = string(m.Name)
			}
		}
	}
	classes, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range classes {
		if mapped[c.Name] == "" && c.Spec.ExtendedResourceName == nil && !notQueued[c.Name] {
			t.Errorf("DeviceClass %s has no deviceClassMapping and no extendedResourceName: Kueue cannot count it against a quota", c.Name)
		}
		if mapped[c.Name] != "" && notQueued[c.Name] {
			t.Errorf("DeviceClass %s is mapped to %s but documented as not for queued claims", c.Name, mapped[c.Name])
		}
	}
	// What Kueue v0.19's configuration validation (pkg/config, validateDeviceClassMappings)
	// refuses to start on: more than 16 mappings, more than 8 DeviceClasses in one.
	if n := len(cfg.Resources.DeviceClassMappings); n > 16 {
		t.Errorf("resources.deviceClassMappings has %d mappings; Kueue takes at most 16", n)
	}
	for i, m := range cfg.Resources.DeviceClassMappings {
		if n := len(m.DeviceClassNames); n > 8 {
			t.Errorf("resources.deviceClassMappings[%d].deviceClassNames has %d classes; Kueue takes at most 8 and would not start", i, n)
		}
	}
	if !cfg.FeatureGates["KueueDRAIntegration"] || !cfg.FeatureGates["KueueDRAIntegrationConsumableCapacity"] {
		t.Error("featureGates.KueueDRAIntegration or KueueDRAIntegrationConsumableCapacity is off: Kueue would not charge ResourceClaimTemplates by their devices' compute")
	}
	if cfg.FeatureGates["KueueDRAIntegrationExtendedResource"] {
		t.Error("featureGates.KueueDRAIntegrationExtendedResource is on: Kueue would refuse the extended resources of classes with a capacity source instead of transforming them")
	}
	w := cfg.WaitForPodsReady
	if w == nil || w.Timeout.Duration <= 0 {
		t.Fatalf("waitForPodsReady = %+v, want a timeout", w)
	}
	if w.BlockAdmission != nil && *w.BlockAdmission {
		t.Error("waitForPodsReady.blockAdmission would admit one gang at a time")
	}
	checkFairSharing(t, &cfg)
}

// checkFairSharing: fair sharing between a cohort's ClusterQueues is on with a list of
// preemption strategies Kueue v0.19 accepts (its config validation takes exactly these
// three), and admission fair sharing, where a ClusterQueue opts in, counts GPUs only.
func checkFairSharing(t *testing.T, cfg *kueueconfig.Configuration) {
	t.Helper()
	fs := cfg.FairSharing
	if fs == nil {
		t.Fatal("fairSharing is not set: the ClusterQueues of a cohort would not share by weight")
	}
	accepted := [][]kueueconfig.PreemptionStrategy{
		{kueueconfig.LessThanOrEqualToFinalShare},
		{kueueconfig.LessThanInitialShare},
		{kueueconfig.LessThanOrEqualToFinalShare, kueueconfig.LessThanInitialShare},
	}
	if !slices.ContainsFunc(accepted, func(a []kueueconfig.PreemptionStrategy) bool { return slices.Equal(a, fs.PreemptionStrategies) }) {
		t.Errorf("fairSharing.preemptionStrategies = %v, Kueue accepts only %v", fs.PreemptionStrategies, accepted)
	}
	afs := cfg.AdmissionFairSharing
	if afs == nil {
		t.Fatal("admissionFairSharing is not set")
	}
	if afs.UsageHalfLifeTime.Duration < 0 || afs.UsageSamplingInterval.Duration <= 0 {
		t.Errorf("admissionFairSharing: usageHalfLifeTime %s, usageSamplingInterval %s: Kueue wants a half-life of at least 0 and an interval above 0",
			afs.UsageHalfLifeTime.Duration, afs.UsageSamplingInterval.Duration)
	}
	// Kueue weighs every resource not named 1, and memory counts in bytes: anything but GPU
	// percent left at 1 would drown the GPUs a LocalQueue used.
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if w, ok := afs.ResourceWeights[res]; !ok || w != 0 {
			t.Errorf("admissionFairSharing.resourceWeights[%s] = %v (set %v), want 0: only %s should count", res, w, ok, api.QuotaGPUPercent)
		}
	}
	if w := afs.ResourceWeights[corev1.ResourceName(api.QuotaGPUPercent)]; w <= 0 {
		t.Errorf("admissionFairSharing.resourceWeights[%s] = %v, want above 0", api.QuotaGPUPercent, w)
	}
}

// TestSampleTeamsShareByWeight: the sample ClusterQueues of one cohort carry fair-sharing
// weights, team-a 2 to team-b's 1, so what they borrow is split 2:1.
func TestSampleTeamsShareByWeight(t *testing.T) {
	data, err := os.ReadFile("kueue/10-queues.yaml")
	if err != nil {
		t.Fatal(err)
	}
	weights := map[string]string{}
	cohorts := map[string]bool{}
	r := yaml.NewYAMLReader(bufioReader(data))
	for {
		doc, err := r.Read()
		if err != nil {
			break
		}
		var cq kueue.ClusterQueue
		if err := sigsyaml.Unmarshal(doc, &cq); err != nil || cq.Kind != "ClusterQueue" {
			continue
		}
		cohorts[string(cq.Spec.CohortName)] = true
		if cq.Spec.FairSharing == nil || cq.Spec.FairSharing.Weight == nil {
			t.Errorf("ClusterQueue %s has no fairSharing.weight", cq.Name)
			continue
		}
		weights[cq.Name] = cq.Spec.FairSharing.Weight.String()
	}
	if want := map[string]string{"team-a": "2", "team-b": "1"}; !maps.Equal(weights, want) {
		t.Errorf("fair-sharing weights %v, want %v", weights, want)
	}
	if len(cohorts) != 1 || cohorts[""] {
		t.Errorf("the sample ClusterQueues are in cohorts %v, want one", cohorts)
	}
}

// TestNVLinkGroupsAreChargedInGPUs: every sized NVLink-group DeviceClass is an extended
// resource that the Kueue configuration transforms into gpudra.dev/gpu-percent, 100 for each
// GPU its selector asks for (gpuCount == k), replacing the group itself, so a ClusterQueue's
// quota covers it; and every transformation takes a shipped class's resource
// (the device plugin's names are checked by TestDevicePluginNamesAreCharged).
func TestNVLinkGroupsAreChargedInGPUs(t *testing.T) {
	var cfg kueueconfig.Configuration
	if err := sigsyaml.UnmarshalStrict(deployments.KueueConfiguration, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Resources == nil {
		t.Fatal("kueue-config.yaml has no resources")
	}
	transforms := map[corev1.ResourceName]kueueconfig.ResourceTransformation{}
	for _, tr := range cfg.Resources.Transformations {
		transforms[tr.Input] = tr
	}
	classes, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	gpuCount := regexp.MustCompile(`gpuCount == (\d+)`)
	sized := 0
	for _, c := range classes {
		if c.Spec.ExtendedResourceName == nil {
			continue
		}
		ext := corev1.ResourceName(*c.Spec.ExtendedResourceName)
		if deviceType(c) != "nvlink-group" {
			delete(transforms, ext)
			continue
		}
		var want int64
		for _, s := range c.Spec.Selectors {
			if m := gpuCount.FindStringSubmatch(s.CEL.Expression); m != nil {
				want, _ = strconv.ParseInt(m[1], 10, 64)
				want *= 100
			}
		}
		if want == 0 {
			t.Errorf("DeviceClass %s (extended resource %s) selects no fixed gpuCount: Kueue cannot know how many GPUs it is", c.Name, ext)
			continue
		}
		sized++
		tr, ok := transforms[ext]
		delete(transforms, ext)
		if !ok {
			t.Errorf("DeviceClass %s: no resources.transformations entry for %s: Kueue would charge it as 1 %s, not %d %s", c.Name, ext, ext, want, api.QuotaGPUPercent)
			continue
		}
		if tr.Strategy == nil || *tr.Strategy != kueueconfig.Replace {
			t.Errorf("transformation of %s: strategy %v, want Replace (Retain would also charge the group itself)", ext, tr.Strategy)
		}
		got := tr.Outputs[api.QuotaGPUPercent]
		if len(tr.Outputs) != 1 || got.Value() != want {
			var outputs []string
			for name, q := range tr.Outputs {
				outputs = append(outputs, string(name)+": "+q.String())
			}
			t.Errorf("transformation of %s: outputs {%s}, want {%s: %d}", ext, strings.Join(outputs, ", "), api.QuotaGPUPercent, want)
		}
	}
	if sized == 0 {
		t.Error("no sized NVLink-group DeviceClass is shipped")
	}
	for in := range transforms {
		t.Errorf("transformation of %s: no shipped DeviceClass has that extendedResourceName", in)
	}
}

// TestSampleQueuesCoverWhatKueueCharges: Kueue never admits a workload charged a resource its
// ClusterQueue does not cover, so each sample ClusterQueue covers every resource the Kueue
// configuration charges (deviceClassMappings and transformation outputs), and that is one
// resource, gpudra.dev/gpu-percent: with two, a team's quota in one would not bound what it
// holds in the other.
func TestSampleQueuesCoverWhatKueueCharges(t *testing.T) {
	var cfg kueueconfig.Configuration
	if err := sigsyaml.UnmarshalStrict(deployments.KueueConfiguration, &cfg); err != nil {
		t.Fatal(err)
	}
	charged := map[string]bool{}
	for _, m := range cfg.Resources.DeviceClassMappings {
		charged[string(m.Name)] = true
	}
	for _, tr := range cfg.Resources.Transformations {
		delete(charged, string(tr.Input))
		for out := range tr.Outputs {
			charged[string(out)] = true
		}
	}
	if len(charged) != 1 || !charged[api.QuotaGPUPercent] {
		t.Errorf("the Kueue configuration charges %v, want only %s", charged, api.QuotaGPUPercent)
	}
	data, err := os.ReadFile("kueue/10-queues.yaml")
	if err != nil {
		t.Fatal(err)
	}
	queues := 0
	r := yaml.NewYAMLReader(bufioReader(data))
	for {
		doc, err := r.Read()
		if err != nil {
			break
		}
		var cq kueue.ClusterQueue
		if err := sigsyaml.Unmarshal(doc, &cq); err != nil || cq.Kind != "ClusterQueue" {
			continue
		}
		queues++
		covered := map[string]bool{}
		for _, g := range cq.Spec.ResourceGroups {
			for _, res := range g.CoveredResources {
				covered[string(res)] = true
			}
			for _, f := range g.Flavors {
				var names []string
				for _, q := range f.Resources {
					names = append(names, string(q.Name))
					if q.NominalQuota.Sign() <= 0 && charged[string(q.Name)] {
						t.Errorf("ClusterQueue %s: flavor %s has no quota of %s", cq.Name, f.Name, q.Name)
					}
				}
				if strings.Join(names, ",") != joinNames(g.CoveredResources) {
					t.Errorf("ClusterQueue %s: flavor %s lists %v, Kueue wants the covered resources %v in order", cq.Name, f.Name, names, g.CoveredResources)
				}
			}
		}
		for res := range charged {
			if !covered[res] {
				t.Errorf("ClusterQueue %s does not cover %s: workloads charged it would never be admitted", cq.Name, res)
			}
		}
	}
	if queues == 0 {
		t.Fatal("no ClusterQueue in kueue/10-queues.yaml")
	}
}

func joinNames(names []corev1.ResourceName) string {
	s := make([]string, len(names))
	for i, n := range names {
		s[i] = string(n)
	}
	return strings.Join(s, ",")
}

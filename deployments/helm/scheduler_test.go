package helm_test

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/deployments"
)

// componentOf lists the kind/namespace/name of every rendered object of a component.
func componentOf(t *testing.T, m manifest, component string) []string {
	t.Helper()
	var out []string
	for _, o := range m.objs {
		var labels struct {
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
		}
		data, err := yaml.Marshal(o.obj)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(data, &labels); err != nil {
			t.Fatal(err)
		}
		if labels.Metadata.Labels["app.kubernetes.io/component"] == component {
			out = append(out, o.kind+" "+o.namespace+"/"+o.name)
		}
	}
	slices.Sort(out)
	return out
}

// gpudra-scheduler is off by default; scheduler.enabled installs it as a second
// kube-scheduler: its ServiceAccount bound to kube-scheduler's own ClusterRoles and the
// authentication reader, get/update of its own Lease only, its configuration in a ConfigMap,
// and a non-root Deployment of its image that mounts it.
func TestSchedulerOnlyWhenEnabled(t *testing.T) {
	if got := componentOf(t, render(t), "scheduler"); len(got) > 0 {
		t.Errorf("the default rendering holds scheduler objects: %v", got)
	}
	m := render(t, "scheduler.enabled=true", "scheduler.replicas=2", "image.registry=registry.example/gpu", "image.tag=1.2.3")
	want := []string{
		"ClusterRoleBinding /gpudra-scheduler-as-kube-scheduler",
		"ClusterRoleBinding /gpudra-scheduler-as-volume-scheduler",
		"ConfigMap gpudra/gpudra-scheduler",
		"Deployment gpudra/gpudra-scheduler",
		"Role gpudra/gpudra-scheduler-leader-election",
		"RoleBinding gpudra/gpudra-scheduler-leader-election",
		"RoleBinding kube-system/gpudra-scheduler-extension-apiserver-authentication-reader",
		"ServiceAccount gpudra/gpudra-scheduler",
	}
	if got := componentOf(t, m, "scheduler"); !slices.Equal(got, want) {
		t.Errorf("scheduler objects:\n%v\nwant\n%v", got, want)
	}
	sa := rbacv1.Subject{Kind: "ServiceAccount", Name: "gpudra-scheduler", Namespace: namespace}
	for name, role := range map[string]rbacv1.RoleRef{
		"gpudra-scheduler-as-kube-scheduler":   {APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:kube-scheduler"},
		"gpudra-scheduler-as-volume-scheduler": {APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:volume-scheduler"},
	} {
		b := m.get("ClusterRoleBinding", name).(*rbacv1.ClusterRoleBinding)
		if b.RoleRef != role || !slices.Equal(b.Subjects, []rbacv1.Subject{sa}) {
			t.Errorf("ClusterRoleBinding %s binds %+v to %+v, want %+v to the scheduler's ServiceAccount", name, b.RoleRef, b.Subjects, role)
		}
	}
	auth := m.getIn("RoleBinding", "kube-system", "gpudra-scheduler-extension-apiserver-authentication-reader").(*rbacv1.RoleBinding)
	if auth.RoleRef.Kind != "Role" || auth.RoleRef.Name != "extension-apiserver-authentication-reader" || !slices.Equal(auth.Subjects, []rbacv1.Subject{sa}) {
		t.Errorf("the authentication reader binding is %+v", auth)
	}
	lease := m.getIn("Role", namespace, "gpudra-scheduler-leader-election").(*rbacv1.Role)
	if want := []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"gpudra-scheduler"}, Verbs: []string{"get", "update"}}}; !reflect.DeepEqual(lease.Rules, want) {
		t.Errorf("the leader election Role grants %+v, want %+v", lease.Rules, want)
	}
	leaseBinding := m.getIn("RoleBinding", namespace, "gpudra-scheduler-leader-election").(*rbacv1.RoleBinding)
	if leaseBinding.RoleRef.Name != lease.Name || !slices.Equal(leaseBinding.Subjects, []rbacv1.Subject{sa}) {
		t.Errorf("the leader election RoleBinding is %+v", leaseBinding)
	}

	d := m.get("Deployment", "gpudra-scheduler").(*appsv1.Deployment)
	spec := d.Spec.Template.Spec
	c := spec.Containers[0]
	if *d.Spec.Replicas != 2 || spec.ServiceAccountName != "gpudra-scheduler" || c.Image != "registry.example/gpu/gpudra-scheduler:1.2.3" {
		t.Errorf("Deployment: replicas %d, serviceAccount %s, image %s", *d.Spec.Replicas, spec.ServiceAccountName, c.Image)
	}
	if !slices.Equal(c.Command, []string{"gpudra-scheduler"}) || !slices.Contains(c.Args, "--config=/etc/gpudra-scheduler/config.yaml") {
		t.Errorf("container runs %v %v, want gpudra-scheduler --config=/etc/gpudra-scheduler/config.yaml", c.Command, c.Args)
	}
	if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || *sc.RunAsUser != 65532 {
		t.Errorf("pod security context %+v, want non-root 65532 (the image's user)", sc)
	}
	v := volumeOf(spec, "config")
	if v == nil || v.ConfigMap == nil || v.ConfigMap.Name != "gpudra-scheduler" || !slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool {
		return vm.Name == "config" && vm.MountPath == "/etc/gpudra-scheduler"
	}) {
		t.Errorf("the configuration is not mounted at /etc/gpudra-scheduler: volume %+v, mounts %+v", v, c.VolumeMounts)
	}

	cfg := loadSchedulerConfig(t, m)
	if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != "gpudra-scheduler" {
		t.Fatalf("profiles %+v, want one named gpudra-scheduler", cfg.Profiles)
	}
	le := cfg.LeaderElection
	if !le.LeaderElect || le.ResourceLock != "leases" || le.ResourceName != "gpudra-scheduler" || le.ResourceNamespace != namespace {
		t.Errorf("leader election %+v, want Lease gpudra-scheduler in %s", le, namespace)
	}
	enabled := false
	for _, p := range cfg.Profiles[0].Plugins.MultiPoint.Enabled {
		enabled = enabled || (p.Name == "GPUFragmentation" && p.Weight == 5)
	}
	if !enabled {
		t.Errorf("profile gpudra-scheduler does not score with GPUFragmentation (weight 5): %+v", cfg.Profiles[0].Plugins.MultiPoint)
	}
	// The chart's typical pods are those of the plain configuration's default profile.
	if got, want := typicalPods(t, configMapData(t, m)), typicalPods(t, string(deployments.SchedulerConfiguration)); !reflect.DeepEqual(got, want) || got == nil {
		t.Errorf("the chart's typicalPods differ from deployments/scheduler/scheduler-config.yaml's:\n%v\n%v", got, want)
	}
}

// To replace kube-scheduler, the profile takes its name.
func TestSchedulerReplacesTheDefaultProfile(t *testing.T) {
	cfg := loadSchedulerConfig(t, render(t, "scheduler.enabled=true", "scheduler.schedulerName=default-scheduler"))
	if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != "default-scheduler" {
		t.Errorf("profiles %+v, want one named default-scheduler", cfg.Profiles)
	}
	out, err := template(t, []string{"scheduler.enabled=true", "scheduler.schedulerName=GPU_Scheduler"})
	if err == nil || !strings.Contains(out, `scheduler.schedulerName="GPU_Scheduler": must be a DNS label`) {
		t.Errorf("a bad scheduler name: err %v, output should name scheduler.schedulerName:\n%s", err, out)
	}
}

func configMapData(t *testing.T, m manifest) string {
	t.Helper()
	cm, ok := m.getIn("ConfigMap", namespace, "gpudra-scheduler").(*corev1.ConfigMap)
	if !ok {
		t.Fatal("no ConfigMap gpudra-scheduler")
	}
	return cm.Data["config.yaml"]
}

// loadSchedulerConfig loads the rendered configuration as kube-scheduler does and validates it.
func loadSchedulerConfig(t *testing.T, m manifest) *schedulerconfig.KubeSchedulerConfiguration {
	t.Helper()
	logger, _ := ktesting.NewTestContext(t)
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(configMapData(t, m)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := options.LoadConfigFromFile(logger, path)
	if err != nil {
		t.Fatalf("kube-scheduler does not load the chart's configuration: %v", err)
	}
	if err := validation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		t.Fatalf("the chart's configuration is invalid: %v", err)
	}
	return cfg
}

// typicalPods are the GPUFragmentation args' typicalPods of a configuration's first profile.
func typicalPods(t *testing.T, config string) []map[string]any {
	t.Helper()
	var cfg struct {
		Profiles []struct {
			PluginConfig []struct {
				Name string `json:"name"`
				Args struct {
					TypicalPods []map[string]any `json:"typicalPods"`
				} `json:"args"`
			} `json:"pluginConfig"`
		} `json:"profiles"`
	}
	if err := yaml.Unmarshal([]byte(config), &cfg); err != nil {
		t.Fatal(err)
	}
	for _, pc := range cfg.Profiles[0].PluginConfig {
		if pc.Name == "GPUFragmentation" {
			return pc.Args.TypicalPods
		}
	}
	return nil
}

// DataLocality scores with scheduler.dataLocalityWeight (3 by default); 0 leaves it out,
// and a weight that is not a whole number is refused, naming the value.
func TestSchedulerDataLocalityWeight(t *testing.T) {
	weight := func(sets ...string) (int32, bool) {
		cfg := loadSchedulerConfig(t, render(t, append([]string{"scheduler.enabled=true"}, sets...)...))
		for _, p := range cfg.Profiles[0].Plugins.MultiPoint.Enabled {
			if p.Name == "DataLocality" {
				return p.Weight, true
			}
		}
		return 0, false
	}
	if w, ok := weight(); !ok || w != 3 {
		t.Errorf("default: DataLocality weight %d (enabled %v), want 3", w, ok)
	}
	if w, ok := weight("scheduler.dataLocalityWeight=7"); !ok || w != 7 {
		t.Errorf("dataLocalityWeight=7: weight %d (enabled %v)", w, ok)
	}
	if _, ok := weight("scheduler.dataLocalityWeight=0"); ok {
		t.Error("dataLocalityWeight=0 still scores with DataLocality")
	}
	out, err := template(t, []string{"scheduler.enabled=true", "scheduler.dataLocalityWeight=1.5"})
	if err == nil || !strings.Contains(out, "scheduler.dataLocalityWeight=1.5: want an integer >= 0") {
		t.Errorf("a fractional weight: err %v, output should name scheduler.dataLocalityWeight:\n%s", err, out)
	}
}

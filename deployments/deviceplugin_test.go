package deployments_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache"
	"k8s.io/klog/v2"
	v1helper "k8s.io/kubernetes/pkg/apis/core/v1/helper"
	kueueconfig "sigs.k8s.io/kueue/apis/config/v1beta2"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/driver/simulated"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

func shippedClasses(t *testing.T) []*resourceapi.DeviceClass {
	t.Helper()
	classes, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	return classes
}

var typeSelector = regexp.MustCompile(`\.type == "([^"]+)"`)

// deviceType is the device type a class's selector asks for ("gpu", "mig", ...).
func deviceType(c *resourceapi.DeviceClass) string {
	for _, s := range c.Spec.Selectors {
		if s.CEL == nil {
			continue
		}
		if m := typeSelector.FindStringSubmatch(s.CEL.Expression); m != nil {
			return m[1]
		}
	}
	return ""
}

// chartValues reads the chart's default deviceClasses values.
func chartValues(t *testing.T) (devicePluginNames bool, migProfiles []string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("helm", "gpudra", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		DeviceClasses struct {
			DevicePluginNames bool     `json:"devicePluginNames"`
			MIGProfiles       []string `json:"migProfiles"`
		} `json:"deviceClasses"`
	}
	if err := sigsyaml.Unmarshal(data, &v); err != nil {
		t.Fatalf("helm/gpudra/values.yaml: %v", err)
	}
	return v.DeviceClasses.DevicePluginNames, v.DeviceClasses.MIGProfiles
}

// TestExtendedResourceNamesAreUnique: every shipped class's extendedResourceName is an
// extended resource name a container may ask for, and no two classes carry the same one
// (kube-scheduler would then pick the newer class and silently ignore the other).
func TestExtendedResourceNamesAreUnique(t *testing.T) {
	owner := map[string]string{}
	for _, c := range shippedClasses(t) {
		if errs := validation.IsDNS1123Subdomain(c.Name); len(errs) > 0 {
			t.Errorf("DeviceClass name %q: %s", c.Name, strings.Join(errs, "; "))
		}
		if c.Spec.ExtendedResourceName == nil {
			continue
		}
		ext := *c.Spec.ExtendedResourceName
		if !v1helper.IsExtendedResourceName(corev1.ResourceName(ext)) {
			t.Errorf("DeviceClass %s: extendedResourceName %q is not an extended resource name", c.Name, ext)
		}
		if prev, ok := owner[ext]; ok {
			t.Errorf("DeviceClasses %s and %s both have extendedResourceName %s", prev, c.Name, ext)
		}
		owner[ext] = c.Name
	}
	if owner[api.ExtendedResourceNVIDIAGPU] != api.DeviceClassGPU {
		t.Errorf("extendedResourceName %s is on class %q, want %s", api.ExtendedResourceNVIDIAGPU, owner[api.ExtendedResourceNVIDIAGPU], api.DeviceClassGPU)
	}
}

// TestMIGProfileClassesFollowTheChart: the plain manifests ship, for exactly the chart's
// deviceClasses.migProfiles, a class mig-<profile>.gpudra.dev with the device plugin's name
// nvidia.com/mig-<profile> that selects MIG devices of that profile and nothing else.
func TestMIGProfileClassesFollowTheChart(t *testing.T) {
	on, profiles := chartValues(t)
	if !on {
		t.Error("deviceClasses.devicePluginNames defaults to false; the plain manifests carry the device plugin's names")
	}
	if len(profiles) == 0 {
		t.Fatal("deviceClasses.migProfiles is empty")
	}
	byName := map[string]*resourceapi.DeviceClass{}
	for _, c := range shippedClasses(t) {
		byName[c.Name] = c
	}
	want := map[string]bool{}
	for _, p := range profiles {
		name := api.DeviceClassMIGProfile(p)
		if want[name] {
			t.Errorf("deviceClasses.migProfiles lists %s twice", p)
		}
		want[name] = true
		c := byName[name]
		if c == nil {
			t.Errorf("profile %s: no DeviceClass %s in deployments/deviceclasses", p, name)
			continue
		}
		if got := ptrString(c.Spec.ExtendedResourceName); got != api.ExtendedResourceNVIDIAMIG(p) {
			t.Errorf("DeviceClass %s: extendedResourceName %q, want %s", name, got, api.ExtendedResourceNVIDIAMIG(p))
		}
		expr := fmt.Sprintf(`device.driver == "gpu.gpudra.dev" && device.attributes["gpu.gpudra.dev"].type == "mig" && device.attributes["gpu.gpudra.dev"].migProfile == %q`, p)
		if len(c.Spec.Selectors) != 1 || c.Spec.Selectors[0].CEL == nil || c.Spec.Selectors[0].CEL.Expression != expr {
			t.Errorf("DeviceClass %s: selectors %+v, want the one CEL selector %s", name, c.Spec.Selectors, expr)
		}
	}
	for name := range byName {
		if strings.HasPrefix(name, "mig-") && !want[name] {
			t.Errorf("DeviceClass %s is not in the chart's deviceClasses.migProfiles", name)
		}
	}
	if c := byName[api.DeviceClassGPU]; c == nil || ptrString(c.Spec.ExtendedResourceName) != api.ExtendedResourceNVIDIAGPU {
		t.Errorf("DeviceClass %s does not carry extendedResourceName %s", api.DeviceClassGPU, api.ExtendedResourceNVIDIAGPU)
	}
}

func ptrString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// simMIGNode is a simulated node with dynamic MIG (every profile and placement published).
type simMIGNode struct {
	name    string
	profile string // a built-in profile, or a profile file
}

// simMIGNodes are one node of every MIG-capable GPU model nvmlsim simulates: the built-in
// dgx-a100 (A100 40GB) and dgx-h100 (H100 80GB), and two-GPU nodes of the other models.
func simMIGNodes(t *testing.T) []simMIGNode {
	t.Helper()
	nodes := []simMIGNode{{"dgx-a100", "dgx-a100"}, {"dgx-h100", "dgx-h100"}}
	dir := t.TempDir()
	for _, model := range []string{"A100_SXM4_80GB", "A30_PCIE_24GB", "H200_SXM5_141GB", "B200_SXM5_180GB"} {
		name := strings.ToLower(strings.ReplaceAll(model, "_", "-"))
		file := filepath.Join(dir, name+".yaml")
		profile := fmt.Sprintf(`name: %s
model: %s
count: 2
driver: {version: 550.90.07, cudaVersion: "12.4"}
pcie: {roots: [{name: "pci0000:17", numaNode: 0, gpus: [0, 1]}]}
`, name, model)
		if err := os.WriteFile(file, []byte(profile), 0o644); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, simMIGNode{name, file})
	}
	return nodes
}

func (n simMIGNode) slices(t *testing.T) []*resourceapi.ResourceSlice {
	t.Helper()
	_, rs, err := simulated.Slices(n.profile, n.name, driver.RenderOptions{MIG: driver.MIGDynamic})
	if err != nil {
		t.Fatalf("%s: %v", n.name, err)
	}
	return rs
}

func attrString(d resourceapi.Device, name string) string {
	if a, ok := d.Attributes[resourceapi.QualifiedName(name)]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

// TestMIGProfileClassesSelectTheirProfile: every shipped class's CEL selectors compile within
// the API server's cost limit, and each MIG-profile class selects exactly the MIG devices of
// its profile on simulated nodes of every MIG-capable model; every profile those nodes
// publish has a class.
func TestMIGProfileClassesSelectTheirProfile(t *testing.T) {
	compiler := cel.GetCompiler(cel.Features{EnableConsumableCapacity: true})
	compiled := map[string][]cel.CompilationResult{}
	for _, c := range shippedClasses(t) {
		for _, s := range c.Spec.Selectors {
			res := compiler.CompileCELExpression(s.CEL.Expression, cel.Options{})
			if res.Error != nil {
				t.Errorf("DeviceClass %s: %v", c.Name, res.Error)
				continue
			}
			if res.MaxCost > resourceapi.CELSelectorExpressionMaxCost {
				t.Errorf("DeviceClass %s: estimated CEL cost %d is over the API server's limit %d", c.Name, res.MaxCost, resourceapi.CELSelectorExpressionMaxCost)
			}
			compiled[c.Name] = append(compiled[c.Name], res)
		}
	}
	_, profiles := chartValues(t)
	for _, n := range simMIGNodes(t) {
		t.Run(n.name, func(t *testing.T) {
			published := map[string]int{}
			for _, sl := range n.slices(t) {
				for _, d := range sl.Spec.Devices {
					profile := ""
					if attrString(d, api.AttrType) == api.TypeMIG {
						profile = attrString(d, api.AttrMIGProfile)
						published[profile]++
					}
					input := cel.Device{Driver: sl.Spec.Driver, AllowMultipleAllocations: d.AllowMultipleAllocations, Attributes: d.Attributes, Capacity: d.Capacity}
					for _, p := range profiles {
						class := api.DeviceClassMIGProfile(p)
						selected := true
						for _, res := range compiled[class] {
							ok, _, err := res.DeviceMatches(context.Background(), input)
							if err != nil {
								t.Fatalf("DeviceClass %s on device %s: %v", class, d.Name, err)
							}
							selected = selected && ok
						}
						if selected != (profile == p) {
							t.Errorf("DeviceClass %s selects device %s (MIG profile %q): %v", class, d.Name, profile, selected)
						}
					}
				}
			}
			if len(published) == 0 {
				t.Fatal("the node publishes no MIG devices")
			}
			for p := range published {
				if !slices.Contains(profiles, p) {
					t.Errorf("the node publishes MIG profile %s, which has no DeviceClass (deviceClasses.migProfiles)", p)
				}
			}
		})
	}
}

// extendedResourceClaim is the claim kube-scheduler makes for a pod of one container whose
// resources are requests (the API server copies limits to requests): one request per
// DRA-backed resource, named after the container's index and the resource's place among its
// sorted requests, for the count asked for, on the class that carries the resource's name.
func extendedResourceClaim(t *testing.T, classes *extendedresourcecache.ExtendedResourceCache, pod string, requests map[corev1.ResourceName]int64) *resourceapi.ResourceClaim {
	t.Helper()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{
		Namespace:   "default",
		Name:        pod + "-extended-resources-x7k2q",
		UID:         types.UID(pod + "-extended-resources"),
		Annotations: map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"},
	}}
	names := make([]corev1.ResourceName, 0, len(requests))
	for name := range requests {
		names = append(names, name)
	}
	slices.Sort(names)
	for k, name := range names {
		class := classes.GetDeviceClass(name)
		if class == nil {
			t.Fatalf("no DeviceClass has extendedResourceName %s", name)
		}
		claim.Spec.Devices.Requests = append(claim.Spec.Devices.Requests, resourceapi.DeviceRequest{
			Name: fmt.Sprintf("container-0-request-%d", k),
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: class.Name,
				AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
				Count:           requests[name],
			},
		})
	}
	return claim
}

// schedulerClasses is kube-scheduler's extended-resource view of the shipped classes.
func schedulerClasses(t *testing.T) *extendedresourcecache.ExtendedResourceCache {
	t.Helper()
	c := extendedresourcecache.NewExtendedResourceCache(klog.Background())
	for _, class := range shippedClasses(t) {
		c.OnAdd(class, true)
	}
	return c
}

// allocatedDevices allocates a claim on the node and commits it; nil when it does not fit.
func allocatedDevices(t *testing.T, st *allocation.State, node string, claim *resourceapi.ResourceClaim) []string {
	t.Helper()
	res, err := st.AllocateAndCommit(context.Background(), node, claim)
	if errors.Is(err, allocation.ErrUnsatisfiable) {
		return nil
	}
	if err != nil {
		t.Fatalf("allocating %s: %v", claim.Name, err)
	}
	return allocation.Devices(res[0])
}

// TestDevicePluginRequestsAllocate: a pod asking for the device plugin's names gets what
// the device plugin would give it, from the real structured allocator on simulated
// dynamic-MIG nodes: nvidia.com/gpu: 2 is two whole GPUs; nvidia.com/mig-1g.10gb: 1 is one
// 1g.10gb MIG device, for each of the five replicas of the GPU Operator's MIG example; and
// every MIG-profile class allocates a device of its profile where the node has one.
func TestDevicePluginRequestsAllocate(t *testing.T) {
	classes := schedulerClasses(t)
	_, profiles := chartValues(t)
	for _, n := range simMIGNodes(t) {
		t.Run(n.name, func(t *testing.T) {
			rs := n.slices(t)
			devices := map[string]resourceapi.Device{}
			published := map[string]bool{}
			for _, sl := range rs {
				for _, d := range sl.Spec.Devices {
					devices[d.Name] = d
					if attrString(d, api.AttrType) == api.TypeMIG {
						published[attrString(d, api.AttrMIGProfile)] = true
					}
				}
			}
			newState := func() *allocation.State { return allocation.New(shippedClasses(t), rs) }

			got := allocatedDevices(t, newState(), n.name, extendedResourceClaim(t, classes, "cuda-job", map[corev1.ResourceName]int64{api.ExtendedResourceNVIDIAGPU: 2}))
			if len(got) != 2 || attrString(devices[got[0]], api.AttrType) != api.TypeGPU || attrString(devices[got[1]], api.AttrType) != api.TypeGPU {
				t.Errorf("nvidia.com/gpu: 2 allocated %v, want 2 whole GPUs", got)
			}

			if published["1g.10gb"] {
				st := newState()
				taken := map[string]bool{}
				for replica := range 5 {
					pod := fmt.Sprintf("example-mig-%d", replica)
					got := allocatedDevices(t, st, n.name, extendedResourceClaim(t, classes, pod, map[corev1.ResourceName]int64{corev1.ResourceName(api.ExtendedResourceNVIDIAMIG("1g.10gb")): 1}))
					if len(got) != 1 || attrString(devices[got[0]], api.AttrMIGProfile) != "1g.10gb" || taken[got[0]] {
						t.Fatalf("replica %d: nvidia.com/mig-1g.10gb: 1 allocated %v, want one more 1g.10gb MIG device (have %v)", replica, got, taken)
					}
					taken[got[0]] = true
				}
			}

			for _, p := range profiles {
				ext := corev1.ResourceName(api.ExtendedResourceNVIDIAMIG(p))
				got := allocatedDevices(t, newState(), n.name, extendedResourceClaim(t, classes, "pod", map[corev1.ResourceName]int64{ext: 1}))
				switch {
				case !published[p] && got != nil:
					t.Errorf("%s: 1 allocated %v; the node publishes no %s device", ext, got, p)
				case published[p] && (len(got) != 1 || attrString(devices[got[0]], api.AttrMIGProfile) != p):
					t.Errorf("%s: 1 allocated %v, want one %s MIG device", ext, got, p)
				}
			}
		})
	}
}

// TestDevicePluginNamesAreCharged: Kueue charges every gpudra DeviceClass (but the MIG-profile
// classes, which are for extended resources) to one quota resource, gpudra.dev/gpu-percent,
// by the devices' compute capacity; and it charges the device plugin's names as the claims on
// the same devices are charged: nvidia.com/gpu as 100 and each nvidia.com/mig-<profile> as
// the most any simulated GPU model's device of that profile takes, replacing the name itself
// so that the one quota covers them.
func TestDevicePluginNamesAreCharged(t *testing.T) {
	var cfg kueueconfig.Configuration
	if err := sigsyaml.UnmarshalStrict(deployments.KueueConfiguration, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Resources == nil {
		t.Fatal("kueue-config.yaml has no resources")
	}
	mapped := map[string]kueueconfig.DeviceClassMapping{}
	for _, m := range cfg.Resources.DeviceClassMappings {
		for _, c := range m.DeviceClassNames {
			mapped[string(c)] = m
		}
	}
	for _, c := range shippedClasses(t) {
		m, ok := mapped[c.Name]
		if deviceType(c) == api.TypeMIG && c.Spec.ExtendedResourceName != nil || c.Name == api.DeviceClassAMDGPU || c.Name == api.DeviceClassHygonGPU || notQueued[c.Name] {
			// Kueue takes 8 classes a mapping: claims for one vendor's GPUs name
			// any-gpu.gpudra.dev with a vendor selector; queued groups name
			// nvlink-group classes (notQueued).
			if ok {
				t.Errorf("class %s is mapped: it is charged through its extended resource", c.Name)
			}
			continue
		}
		switch {
		case !ok:
			t.Errorf("DeviceClass %s is not in resources.deviceClassMappings: Kueue refuses claims on it", c.Name)
		case m.Name != api.QuotaGPUPercent:
			t.Errorf("DeviceClass %s is charged to %s, want %s", c.Name, m.Name, api.QuotaGPUPercent)
		case len(m.Sources) != 1 || m.Sources[0].Capacity == nil || m.Sources[0].Capacity.Name != api.CapCompute || m.Sources[0].Capacity.Driver != api.DriverName:
			t.Errorf("DeviceClass %s: sources %+v, want one capacity source on %s of driver %s", c.Name, m.Sources, api.CapCompute, api.DriverName)
		}
	}
	if cfg.FeatureGates["KueueDRAIntegrationExtendedResource"] || !cfg.FeatureGates["KueueDRAIntegrationConsumableCapacity"] || !cfg.FeatureGates["KueueDRAIntegration"] {
		t.Errorf("featureGates %v: want KueueDRAIntegration and KueueDRAIntegrationConsumableCapacity on, KueueDRAIntegrationExtendedResource off", cfg.FeatureGates)
	}
	transforms := map[corev1.ResourceName]kueueconfig.ResourceTransformation{}
	for _, tr := range cfg.Resources.Transformations {
		transforms[tr.Input] = tr
	}
	// What a device of each MIG profile takes, at most, on the simulated models.
	profilePercent := map[string]int64{}
	for _, n := range simMIGNodes(t) {
		for _, sl := range n.slices(t) {
			for _, d := range sl.Spec.Devices {
				if attrString(d, api.AttrType) == api.TypeMIG {
					c := d.Capacity[api.CapCompute].Value
					p := attrString(d, api.AttrMIGProfile)
					profilePercent[p] = max(profilePercent[p], c.Value())
				}
			}
		}
	}
	names := 0
	for _, c := range shippedClasses(t) {
		if c.Spec.ExtendedResourceName == nil || !strings.HasPrefix(*c.Spec.ExtendedResourceName, "nvidia.com/") {
			continue
		}
		names++
		ext := corev1.ResourceName(*c.Spec.ExtendedResourceName)
		var want int64
		switch deviceType(c) {
		case api.TypeGPU:
			want = 100
		case api.TypeMIG:
			want = profilePercent[migProfileOf(c)]
			if want == 0 {
				t.Errorf("DeviceClass %s: no simulated model publishes MIG profile %q", c.Name, migProfileOf(c))
				continue
			}
		default:
			t.Errorf("DeviceClass %s (%s) selects device type %q; want gpu or mig", c.Name, ext, deviceType(c))
			continue
		}
		tr, ok := transforms[ext]
		if !ok {
			t.Errorf("DeviceClass %s: no resources.transformations entry for %s: Kueue would charge it as 1 %s, which no gpudra quota holds", c.Name, ext, ext)
			continue
		}
		if tr.Strategy == nil || *tr.Strategy != kueueconfig.Replace {
			t.Errorf("transformation of %s: strategy %v, want Replace (Retain would also charge %s itself)", ext, tr.Strategy, ext)
		}
		q := tr.Outputs[api.QuotaGPUPercent]
		if len(tr.Outputs) != 1 || q.Value() != want {
			t.Errorf("transformation of %s: outputs %v, want {%s: %d}", ext, tr.Outputs, api.QuotaGPUPercent, want)
		}
	}
	if _, profiles := chartValues(t); names != 1+len(profiles) {
		t.Errorf("%d shipped classes carry a device plugin name, want nvidia.com/gpu and one per MIG profile (%d)", names, 1+len(profiles))
	}
	for _, n := range []int{2, 4, 8} {
		tr := transforms[corev1.ResourceName(api.ExtendedResourceNVLinkGroupOf(n))]
		if q := tr.Outputs[api.QuotaGPUPercent]; q.Value() != int64(100*n) {
			t.Errorf("transformation of %s: outputs %v, want {%s: %d}", api.ExtendedResourceNVLinkGroupOf(n), tr.Outputs, api.QuotaGPUPercent, 100*n)
		}
	}
	// AMD's and Hygon's device plugins' names are a whole GPU, charged like a whole GPU of
	// any vendor.
	for _, ext := range []corev1.ResourceName{api.ExtendedResourceAMDGPU, api.ExtendedResourceHygonDCU} {
		if tr := transforms[ext]; len(tr.Outputs) != 1 || tr.Outputs.Name(api.QuotaGPUPercent, resource.DecimalSI).Value() != 100 {
			t.Errorf("transformation of %s: outputs %v, want {%s: 100}", ext, tr.Outputs, api.QuotaGPUPercent)
		}
	}
}

// migProfileOf is the MIG profile a MIG-profile class selects (from its CEL selector).
func migProfileOf(c *resourceapi.DeviceClass) string {
	for _, s := range c.Spec.Selectors {
		if m := regexp.MustCompile(`migProfile == "([^"]+)"`).FindStringSubmatch(s.CEL.Expression); m != nil {
			return m[1]
		}
	}
	return ""
}

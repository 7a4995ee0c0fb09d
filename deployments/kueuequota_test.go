package deployments

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kueueconfig "sigs.k8s.io/kueue/apis/config/v1beta2"
	"sigs.k8s.io/yaml"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// typed reads a configuration map as Kueue's own Configuration type, strictly.
func typed(t *testing.T, cfg map[string]any) kueueconfig.Configuration {
	t.Helper()
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var c kueueconfig.Configuration
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		t.Fatalf("not a Kueue Configuration: %v", err)
	}
	return c
}

// mappingOf is the mapping that names class, and how many mappings do.
func mappingOf(c kueueconfig.Configuration, class string) (kueueconfig.DeviceClassMapping, int) {
	var found kueueconfig.DeviceClassMapping
	n := 0
	for _, m := range c.Resources.DeviceClassMappings {
		for _, name := range m.DeviceClassNames {
			if string(name) == class {
				found, n = m, n+1
			}
		}
	}
	return found, n
}

func outputOf(t *testing.T, c kueueconfig.Configuration, input string) corev1.ResourceList {
	t.Helper()
	for _, tr := range c.Resources.Transformations {
		if string(tr.Input) == input {
			return tr.Outputs
		}
	}
	t.Fatalf("no transformation of %s", input)
	return nil
}

func TestKueueConfigurationForWholeGPUsByCount(t *testing.T) {
	shipped, err := KueueConfigurationFor("")
	if err != nil {
		t.Fatal(err)
	}
	percent, err := KueueConfigurationFor(KueueWholeGPUQuotaPercent)
	if err != nil {
		t.Fatal(err)
	}
	if s, p := typed(t, shipped), typed(t, percent); len(s.Resources.DeviceClassMappings) != len(p.Resources.DeviceClassMappings) {
		t.Errorf("percent changed the shipped mappings")
	}
	count, err := KueueConfigurationFor(KueueWholeGPUQuotaCount)
	if err != nil {
		t.Fatal(err)
	}
	c := typed(t, count)
	for _, class := range []string{api.DeviceClassGPU, api.DeviceClassAnyGPU} {
		m, n := mappingOf(c, class)
		if n != 1 || string(m.Name) != api.QuotaGPU || len(m.Sources) != 0 {
			t.Errorf("%s: in %d mappings, the last %s with %d sources; want one, %s without sources", class, n, m.Name, len(m.Sources), api.QuotaGPU)
		}
	}
	// Every other class keeps its charge in GPU percent from the device's compute.
	for _, class := range []string{api.DeviceClassShare, api.DeviceClassMIG, api.DeviceClassNVLinkGroup} {
		m, n := mappingOf(c, class)
		if n != 1 || string(m.Name) != api.QuotaGPUPercent || len(m.Sources) != 1 {
			t.Errorf("%s: in %d mappings, the last %s with %d sources; want the shipped %s mapping", class, n, m.Name, len(m.Sources), api.QuotaGPUPercent)
		}
	}
	for _, in := range []string{api.ExtendedResourceNVIDIAGPU, api.ExtendedResourceAMDGPU, api.ExtendedResourceHygonDCU} {
		out := outputOf(t, c, in)
		if q := out[corev1.ResourceName(api.QuotaGPU)]; len(out) != 1 || q.Cmp(resource.MustParse("1")) != 0 {
			t.Errorf("%s: outputs %v, want %s: 1", in, out, api.QuotaGPU)
		}
	}
	// A MIG profile that takes a whole GPU's percent is still charged in percent.
	if out := outputOf(t, c, "nvidia.com/mig-7g.80gb"); len(out) != 1 || out.Name(api.QuotaGPUPercent, resource.DecimalSI).Value() != 100 {
		t.Errorf("nvidia.com/mig-7g.80gb: outputs %v, want %s: 100", out, api.QuotaGPUPercent)
	}
	// The shipped configuration itself is left as it was.
	if again := typed(t, shipped); len(again.Resources.DeviceClassMappings) != 1 {
		t.Errorf("the shipped configuration has %d mappings after the count one was made, want 1", len(again.Resources.DeviceClassMappings))
	}
}

func TestKueueConfigurationForRefusesAnUnknownQuota(t *testing.T) {
	_, err := KueueConfigurationFor("gpus")
	if err == nil || !strings.Contains(err.Error(), `"gpus"`) || !strings.Contains(err.Error(), "percent") || !strings.Contains(err.Error(), "count") {
		t.Fatalf("err = %v, want one naming the value and the accepted ones", err)
	}
}

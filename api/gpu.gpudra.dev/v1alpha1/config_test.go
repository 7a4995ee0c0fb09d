package v1alpha1_test

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

const driverName = "gpu.gpudra.dev"

func TestValidateOpaque(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		// wantErr lists substrings the error must contain; empty means valid.
		wantErr []string
	}{
		{name: "empty GpuConfig is valid", yaml: "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig"},
		{name: "time-slicing with an interval", yaml: `
apiVersion: gpu.gpudra.dev/v1alpha1
kind: GpuConfig
sharing: {strategy: TimeSlicing, timeSlicing: {interval: Long}}`},
		{name: "MPS with limits", yaml: `
apiVersion: gpu.gpudra.dev/v1alpha1
kind: MigConfig
sharing: {strategy: MPS, mps: {defaultActiveThreadPercentage: 50, defaultPinnedDeviceMemoryLimit: 5Gi}}`},
		{name: "wrong apiVersion names the field and the accepted value", yaml: "apiVersion: gpu.gpudra.dev/v1\nkind: GpuConfig",
			wantErr: []string{"spec.config[0].opaque.parameters.apiVersion", `"gpu.gpudra.dev/v1alpha1"`}},
		{name: "unknown kind names the accepted kinds", yaml: "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: TpuConfig",
			wantErr: []string{"parameters.kind", `"GpuConfig"`, `"MigConfig"`}},
		{name: "unknown strategy lists the strategies", yaml: "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {strategy: Magic}",
			wantErr: []string{"parameters.sharing.strategy", `"TimeSlicing"`, `"MPS"`}},
		{name: "150% compute is out of range", yaml: "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {strategy: MPS, mps: {defaultActiveThreadPercentage: 150}}",
			wantErr: []string{"parameters.sharing.mps.defaultActiveThreadPercentage", "between 1 and 100"}},
		{name: "unknown field is rejected with its path", yaml: "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {strategy: MPS, mps: {threads: 3}}",
			wantErr: []string{"parameters.sharing.mps.threads", "unknown field"}},
		{name: "unknown top-level field", yaml: "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: MigConfig\nlimits: {enforcement: HAMi}",
			wantErr: []string{"parameters.limits", "unknown field"}},
		{name: "bad interval", yaml: "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {timeSlicing: {interval: Forever}}",
			wantErr: []string{"parameters.sharing.timeSlicing.interval", `"Short"`}},
		{name: "mps block with time-slicing strategy", yaml: "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {strategy: TimeSlicing, mps: {}}",
			wantErr: []string{"parameters.sharing.mps", "strategy is MPS"}},
		{name: "negative pinned memory", yaml: "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {strategy: MPS, mps: {defaultPinnedDeviceMemoryLimit: -1Gi}}",
			wantErr: []string{"defaultPinnedDeviceMemoryLimit", "positive"}},
		{name: "pinned memory below 1Mi names the accepted range", yaml: "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {strategy: MPS, mps: {defaultPinnedDeviceMemoryLimit: 512Ki}}",
			wantErr: []string{"parameters.sharing.mps.defaultPinnedDeviceMemoryLimit", "512Ki", "from 1Mi to 1Pi"}},
		{name: "pinned memory past 1Pi names the accepted range", yaml: "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: MigConfig\nsharing: {strategy: MPS, mps: {defaultPinnedDeviceMemoryLimit: 1e30}}",
			wantErr: []string{"parameters.sharing.mps.defaultPinnedDeviceMemoryLimit", "from 1Mi to 1Pi"}},
		{name: "pinned memory of exactly 1Mi is valid", yaml: "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {strategy: MPS, mps: {defaultPinnedDeviceMemoryLimit: 1Mi}}"},
		{name: "bad enforcement", yaml: "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nlimits: {enforcement: Trust}",
			wantErr: []string{"parameters.limits.enforcement", `"HAMi"`}},
		{name: "duplicate field", yaml: `{"apiVersion":"gpu.gpudra.dev/v1alpha1","kind":"GpuConfig","sharing":{},"sharing":{}}`,
			wantErr: []string{"parameters.sharing", "duplicate"}},
		{name: "a second YAML document is refused, not dropped", yaml: "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\n---\napiVersion: gpu.gpudra.dev/v1alpha1\nkind: MigConfig\nsharing: {strategy: Magic}",
			wantErr: []string{"spec.config[0].opaque.parameters", "2 YAML documents", "one object"}},
		{name: "a leading separator and trailing comments are one document", yaml: "---\napiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\n---\n# nothing more\n"},
		{name: "a Guaranteed share with a cap", yaml: "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nlimits: {policy: Guaranteed, computeLimit: 80, priority: High}"},
		{name: "an unknown share policy lists the policies", yaml: "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nlimits: {policy: Burstable}",
			wantErr: []string{"parameters.limits.policy", `"Fixed"`, `"Guaranteed"`, `"BestEffort"`}},
		{name: "a computeLimit past 100 names the range", yaml: "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nlimits: {policy: BestEffort, computeLimit: 120}",
			wantErr: []string{"parameters.limits.computeLimit", "between 1 and 100"}},
		{name: "a computeLimit on a Fixed share is forbidden", yaml: "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nlimits: {computeLimit: 50}",
			wantErr: []string{"parameters.limits.computeLimit", "Guaranteed or BestEffort"}},
		{name: "an unknown priority lists the priorities", yaml: "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nlimits: {priority: Urgent}",
			wantErr: []string{"parameters.limits.priority", `"High"`, `"Low"`}},
		{name: "a BestEffort share cannot be High priority", yaml: "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nlimits: {policy: BestEffort, priority: High}",
			wantErr: []string{"parameters.limits.priority", "always yields"}},
		{name: "not an object", yaml: `[1,2]`, wantErr: []string{"parameters"}},
		{name: "empty", yaml: ``, wantErr: []string{"parameters", "Required"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := api.ValidateOpaque([]byte(tc.yaml), field.NewPath("spec", "config").Index(0).Child("opaque", "parameters"))
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want an error containing %q, got none", tc.wantErr)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestNormalizeDefaults(t *testing.T) {
	obj, err := api.Decode([]byte("apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig"))
	if err != nil {
		t.Fatal(err)
	}
	obj.Normalize()
	c := obj.(*api.GpuConfig)
	if c.Sharing.Strategy != api.TimeSlicing || c.Sharing.TimeSlicing.Interval != api.IntervalDefault || c.Limits.Enforcement != api.EnforceAuto {
		t.Errorf("defaults: got %+v %+v %+v", c.Sharing, c.Sharing.TimeSlicing, c.Limits)
	}
	obj, _ = api.Decode([]byte("apiVersion: gpu.gpudra.dev/v1alpha1\nkind: MigConfig\nsharing: {strategy: MPS}"))
	obj.Normalize()
	if m := obj.(*api.MigConfig); m.Sharing.MPS == nil || m.Sharing.TimeSlicing != nil {
		t.Errorf("MPS defaults: got %+v", m.Sharing)
	}
}

func opaque(t *testing.T, src resourceapi.AllocationConfigSource, requests []string, y string) resourceapi.DeviceAllocationConfiguration {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return resourceapi.DeviceAllocationConfiguration{
		Source:   src,
		Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: driverName, Parameters: runtime.RawExtension{Raw: js},
		}},
	}
}

func TestResolvePrecedence(t *testing.T) {
	const (
		classMPS   = "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {strategy: MPS, mps: {defaultActiveThreadPercentage: 30}}\nlimits: {enforcement: MPS}"
		claimShort = "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {timeSlicing: {interval: Short}}"
		claimLong  = "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {timeSlicing: {interval: Long}}"
		migMPS     = "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: MigConfig\nsharing: {strategy: MPS}"
	)
	class, claim := resourceapi.AllocationConfigSourceClass, resourceapi.AllocationConfigSourceClaim
	tests := []struct {
		name         string
		configs      []resourceapi.DeviceAllocationConfiguration
		request      string
		wantStrategy api.SharingStrategy
		wantInterval api.TimeSliceInterval
		wantEnforce  api.Enforcement
		wantMIG      api.SharingStrategy
	}{
		{name: "no config gives defaults", request: "gpu", wantStrategy: api.TimeSlicing, wantInterval: api.IntervalDefault, wantEnforce: api.EnforceAuto, wantMIG: api.TimeSlicing},
		{name: "class config applies", request: "gpu", configs: []resourceapi.DeviceAllocationConfiguration{opaque(t, class, nil, classMPS)},
			wantStrategy: api.MPS, wantEnforce: api.EnforceMPS, wantMIG: api.TimeSlicing},
		{name: "claim overrides class sharing but keeps class limits", request: "gpu",
			configs:      []resourceapi.DeviceAllocationConfiguration{opaque(t, claim, nil, claimShort), opaque(t, class, nil, classMPS)},
			wantStrategy: api.TimeSlicing, wantInterval: api.IntervalShort, wantEnforce: api.EnforceMPS, wantMIG: api.TimeSlicing},
		{name: "later claim config wins", request: "gpu",
			configs:      []resourceapi.DeviceAllocationConfiguration{opaque(t, claim, nil, claimShort), opaque(t, claim, nil, claimLong)},
			wantStrategy: api.TimeSlicing, wantInterval: api.IntervalLong, wantEnforce: api.EnforceAuto, wantMIG: api.TimeSlicing},
		{name: "config for another request is ignored", request: "gpu",
			configs:      []resourceapi.DeviceAllocationConfiguration{opaque(t, claim, []string{"other"}, claimLong)},
			wantStrategy: api.TimeSlicing, wantInterval: api.IntervalDefault, wantEnforce: api.EnforceAuto, wantMIG: api.TimeSlicing},
		{name: "config naming the parent request applies to its subrequest", request: "gpu/big",
			configs:      []resourceapi.DeviceAllocationConfiguration{opaque(t, claim, []string{"gpu"}, claimLong), opaque(t, claim, []string{"gpu"}, migMPS)},
			wantStrategy: api.TimeSlicing, wantInterval: api.IntervalLong, wantEnforce: api.EnforceAuto, wantMIG: api.MPS},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := api.Resolve(tc.configs, driverName, tc.request)
			if err != nil {
				t.Fatal(err)
			}
			if got.GPU.Sharing.Strategy != tc.wantStrategy || got.GPU.Limits.Enforcement != tc.wantEnforce || got.MIG.Sharing.Strategy != tc.wantMIG {
				t.Errorf("got strategy %s enforcement %s mig %s", got.GPU.Sharing.Strategy, got.GPU.Limits.Enforcement, got.MIG.Sharing.Strategy)
			}
			if tc.wantInterval != "" && got.GPU.Sharing.TimeSlicing.Interval != tc.wantInterval {
				t.Errorf("interval %s, want %s", got.GPU.Sharing.TimeSlicing.Interval, tc.wantInterval)
			}
		})
	}
}

func TestResolveReportsTheConfigIndex(t *testing.T) {
	bad := opaque(t, resourceapi.AllocationConfigSourceClaim, nil, "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {strategy: MPS, mps: {defaultActiveThreadPercentage: 150}}")
	other := bad
	other.Opaque = &resourceapi.OpaqueDeviceConfiguration{Driver: "other.example.com", Parameters: runtime.RawExtension{Raw: []byte("garbage")}}
	_, err := api.Resolve([]resourceapi.DeviceAllocationConfiguration{other, bad}, driverName, "gpu")
	if err == nil || !strings.Contains(err.Error(), "status.allocation.devices.config[1].opaque.parameters.sharing.mps.defaultActiveThreadPercentage") {
		t.Fatalf("want an error at config[1]...defaultActiveThreadPercentage, got %v", err)
	}
}

func TestValidateForDeviceMemory(t *testing.T) {
	obj, err := api.Decode([]byte("apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {strategy: MPS, mps: {defaultPinnedDeviceMemoryLimit: 100Gi}}"))
	if err != nil {
		t.Fatal(err)
	}
	obj.Normalize()
	s := obj.(*api.GpuConfig).Sharing
	if errs := s.ValidateFor(field.NewPath("sharing"), api.Device{MemoryBytes: 80 << 30}); len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), "sharing.mps.defaultPinnedDeviceMemoryLimit") {
		t.Errorf("100Gi on an 80Gi GPU: got %v", errs)
	}
	if errs := s.ValidateFor(field.NewPath("sharing"), api.Device{MemoryBytes: 141 << 30}); len(errs) != 0 {
		t.Errorf("100Gi on a 141Gi GPU: got %v", errs)
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"apiVersion":"gpu.gpudra.dev/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"MPS","mps":{"defaultActiveThreadPercentage":50,"defaultPinnedDeviceMemoryLimit":"1Gi"}}}`,
		`{"apiVersion":"gpu.gpudra.dev/v1alpha1","kind":"MigConfig","sharing":{"timeSlicing":{"interval":"Long"}}}`,
		"apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nlimits: {enforcement: HAMi}",
		`{"kind":1}`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		obj, err := api.Decode(data)
		if err != nil {
			return
		}
		obj.Normalize()
		_ = obj.Validate()
	})
}

func TestDeepCopyLeavesTheOriginalAsWritten(t *testing.T) {
	obj, err := api.Decode([]byte("apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {strategy: MPS, mps: {defaultActiveThreadPercentage: 30, defaultPinnedDeviceMemoryLimit: 2Gi}}"))
	if err != nil {
		t.Fatal(err)
	}
	orig := obj.(*api.GpuConfig)
	cp := orig.DeepCopyObject().(*api.GpuConfig)
	*cp.Sharing.MPS.DefaultActiveThreadPercentage = 90
	cp.Sharing.MPS.DefaultPinnedDeviceMemoryLimit.Set(1)
	cp.Sharing.Strategy = api.TimeSlicing
	cp.Normalize()
	if m := orig.Sharing.MPS; orig.Sharing.Strategy != api.MPS || *m.DefaultActiveThreadPercentage != 30 || m.DefaultPinnedDeviceMemoryLimit.String() != "2Gi" || orig.Limits != nil {
		t.Errorf("changing the copy changed the original: %+v %+v", orig.Sharing, orig.Limits)
	}
}

func TestShareTierDefaultsAndCaps(t *testing.T) {
	decode := func(limits string) *api.ShareLimits {
		t.Helper()
		obj, err := api.Decode([]byte("apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nlimits: " + limits))
		if err != nil {
			t.Fatal(err)
		}
		obj.Normalize()
		return obj.(*api.GpuConfig).Limits
	}
	for _, tc := range []struct {
		limits      string
		request     int
		policy      api.SharePolicy
		priority    api.SharePriority
		cap         int
		validForReq bool
	}{
		{"{}", 25, api.PolicyFixed, "", 25, true},
		{"{policy: Guaranteed}", 30, api.PolicyGuaranteed, "", 0, true},
		{"{policy: Guaranteed, computeLimit: 60}", 30, api.PolicyGuaranteed, "", 60, true},
		{"{policy: Guaranteed, computeLimit: 20}", 30, api.PolicyGuaranteed, "", 20, false},
		{"{policy: Guaranteed}", 0, api.PolicyGuaranteed, "", 0, false},
		{"{policy: BestEffort}", 0, api.PolicyBestEffort, api.PriorityLow, 0, true},
		{"{policy: BestEffort, computeLimit: 50}", 0, api.PolicyBestEffort, api.PriorityLow, 50, true},
		{"{policy: BestEffort}", 10, api.PolicyBestEffort, api.PriorityLow, 0, false},
	} {
		l := decode(tc.limits)
		if l.Policy != tc.policy || l.Priority != tc.priority {
			t.Errorf("%s: normalized to policy %q priority %q, want %q %q", tc.limits, l.Policy, l.Priority, tc.policy, tc.priority)
		}
		if got := l.ComputeCap(tc.request); got != tc.cap {
			t.Errorf("%s with request %d: cap %d, want %d", tc.limits, tc.request, got, tc.cap)
		}
		if errs := l.ValidateFor(nil, tc.request); (len(errs) == 0) != tc.validForReq {
			t.Errorf("%s with request %d: ValidateFor = %v, want valid %v", tc.limits, tc.request, errs, tc.validForReq)
		}
	}
}

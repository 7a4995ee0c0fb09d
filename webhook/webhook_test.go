package webhook

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

func request(t *testing.T, kind string, obj any) admission.Request {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create,
		Kind:      metav1.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: kind},
		Object:    runtime.RawExtension{Raw: raw},
	}}
}

func claimWith(driver, params string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{}
	c.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.gpudra.dev"}}}
	c.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
		Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(params)}}}}}
	return c
}

// shareClaim asks for one share with compute percent (none when compute is "") and carries
// a GpuConfig with the given limits.
func shareClaim(compute, limits string) *resourceapi.ResourceClaim {
	c := claimWith("gpu.gpudra.dev", `{"apiVersion":"gpu.gpudra.dev/v1alpha1","kind":"GpuConfig","limits":`+limits+`}`)
	c.Spec.Devices.Requests[0].Exactly.DeviceClassName = "gpu-share.gpudra.dev"
	if compute != "" {
		c.Spec.Devices.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{
			Requests: map[resourceapi.QualifiedName]resource.Quantity{"compute": resource.MustParse(compute)}}
	}
	return c
}

// firstAvailableShareClaim asks for a whole GPU or else a share with compute percent, with a
// Guaranteed GpuConfig for the share.
func firstAvailableShareClaim(compute string) *resourceapi.ResourceClaim {
	c := shareClaim("", `{"policy":"Guaranteed"}`)
	c.Spec.Devices.Requests[0].Exactly = nil
	c.Spec.Devices.Requests[0].FirstAvailable = []resourceapi.DeviceSubRequest{
		{Name: "whole", DeviceClassName: "gpu.gpudra.dev"},
		{Name: "share", DeviceClassName: "gpu-share.gpudra.dev", Capacity: &resourceapi.CapacityRequirements{
			Requests: map[resourceapi.QualifiedName]resource.Quantity{"compute": resource.MustParse(compute)}}},
	}
	c.Spec.Devices.Config[0].Requests = []string{"gpu/share"}
	return c
}

func TestHandlerChecksShareTiersAgainstTheRequests(t *testing.T) {
	tests := []struct {
		name    string
		claim   *resourceapi.ResourceClaim
		allowed bool
		want    []string
	}{
		{"a Guaranteed 30 % share bursting to 100 % is admitted", shareClaim("30", `{"policy":"Guaranteed","computeLimit":100}`), true, nil},
		{"a Guaranteed share without a compute request has no floor", shareClaim("", `{"policy":"Guaranteed"}`), false,
			[]string{"spec.devices.config[0].opaque.parameters.limits.policy", "floor is its compute request"}},
		{"a cap below the floor is refused", shareClaim("40", `{"policy":"Guaranteed","computeLimit":20}`), false,
			[]string{"limits.computeLimit", "below the share's compute request (40"}},
		{"a BestEffort share that reserves compute is refused", shareClaim("10", `{"policy":"BestEffort"}`), false,
			[]string{"limits.policy", "reserves no compute"}},
		{"a BestEffort share capped at 50 % is admitted", shareClaim("", `{"policy":"BestEffort","computeLimit":50}`), true, nil},
		{"a High priority BestEffort share is refused", shareClaim("", `{"policy":"BestEffort","priority":"High"}`), false,
			[]string{"limits.priority", "always yields"}},
		{"an unknown policy names the accepted ones", shareClaim("10", `{"policy":"Burst"}`), false,
			[]string{"limits.policy", `"Fixed"`, `"Guaranteed"`, `"BestEffort"`}},
		{"a computeLimit on a Fixed share is refused", shareClaim("10", `{"computeLimit":50}`), false,
			[]string{"limits.computeLimit", "capped at its compute request"}},
		{"a compute request far beyond 100 % is refused, not wrapped", shareClaim("18446744073709551646", `{"policy":"Guaranteed"}`), false,
			[]string{"spec.devices.requests[0].exactly.capacity.requests[compute]", "must be from 0 to 100"}},
		{"a compute request of 1e30 is refused", shareClaim("1e30", `{"policy":"Guaranteed","computeLimit":100}`), false,
			[]string{"spec.devices.requests[0].exactly.capacity.requests[compute]", "must be from 0 to 100"}},
		{"a compute request past int64 is refused", shareClaim("9223372036854775808", `{"policy":"Guaranteed"}`), false,
			[]string{"requests[compute]", "must be from 0 to 100"}},
		{"a compute request just above 100 % is refused", shareClaim("101", `{"policy":"Guaranteed"}`), false,
			[]string{"requests[compute]", "must be from 0 to 100"}},
		{"a negative compute request is refused", shareClaim("-30", `{"policy":"Guaranteed"}`), false,
			[]string{"requests[compute]", "must be from 0 to 100"}},
		{"a huge compute request is refused without a tier", shareClaim("1e30", `{}`), false,
			[]string{"requests[compute]", "must be from 0 to 100"}},
		{"a subrequest's huge compute request is refused at its path", firstAvailableShareClaim("1e30"), false,
			[]string{"spec.devices.requests[0].firstAvailable[1].capacity.requests[compute]", "must be from 0 to 100"}},
		{"a fractional compute request rounds up to the floor", shareClaim("0.5", `{"policy":"Guaranteed","computeLimit":1}`), true, nil},
		{"all of the GPU is a valid floor", shareClaim("100", `{"policy":"Guaranteed"}`), true, nil},
		{"a tier on a whole GPU is refused", claimWith("gpu.gpudra.dev", `{"apiVersion":"gpu.gpudra.dev/v1alpha1","kind":"GpuConfig","limits":{"policy":"Guaranteed"}}`), false,
			[]string{"request \"gpu\" asks for DeviceClass gpu.gpudra.dev", "only to requests of gpu-share.gpudra.dev"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := Handler{}.Handle(context.Background(), request(t, "ResourceClaim", tc.claim))
			if resp.Allowed != tc.allowed {
				t.Fatalf("allowed = %v: %s", resp.Allowed, resp.Result.Message)
			}
			for _, w := range tc.want {
				if !strings.Contains(resp.Result.Message, w) {
					t.Errorf("message %q lacks %q", resp.Result.Message, w)
				}
			}
		})
	}
}

// deviceClassWith is DeviceClass name with one gpudra GpuConfig with the given limits.
func deviceClassWith(name, limits string) *resourceapi.DeviceClass {
	c := &resourceapi.DeviceClass{Spec: resourceapi.DeviceClassSpec{Config: []resourceapi.DeviceClassConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
		Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "gpu.gpudra.dev", Parameters: runtime.RawExtension{
			Raw: []byte(`{"apiVersion":"gpu.gpudra.dev/v1alpha1","kind":"GpuConfig","limits":` + limits + `}`)}}}}}}}
	c.Name = name
	return c
}

func TestHandlerChecksDeviceClassTiers(t *testing.T) {
	tests := []struct {
		name    string
		class   *resourceapi.DeviceClass
		allowed bool
		want    []string
	}{
		{"a Guaranteed tier in the share class is admitted", deviceClassWith("gpu-share.gpudra.dev", `{"policy":"Guaranteed","computeLimit":80}`), true, nil},
		{"a capped BestEffort tier in the share class is admitted", deviceClassWith("gpu-share.gpudra.dev", `{"policy":"BestEffort","computeLimit":50}`), true, nil},
		{"a Fixed config with an enforcement in any class is admitted", deviceClassWith("gpu.gpudra.dev", `{"enforcement":"MPS"}`), true, nil},
		{"a tier in the whole-GPU class is refused", deviceClassWith("gpu.gpudra.dev", `{"policy":"Guaranteed"}`), false,
			[]string{"spec.config[0].opaque.parameters.limits", "DeviceClass gpu.gpudra.dev is not gpu-share.gpudra.dev"}},
		{"a priority in the NVLink group class is refused", deviceClassWith("nvlink-group.gpudra.dev", `{"priority":"High"}`), false,
			[]string{"spec.config[0].opaque.parameters.limits", "policy, computeLimit and priority"}},
		{"a computeLimit in a class of its own is refused", deviceClassWith("team-a.example.com", `{"policy":"BestEffort","computeLimit":20}`), false,
			[]string{"DeviceClass team-a.example.com is not gpu-share.gpudra.dev"}},
		{"a High BestEffort tier in the share class is refused", deviceClassWith("gpu-share.gpudra.dev", `{"policy":"BestEffort","priority":"High"}`), false,
			[]string{"spec.config[0].opaque.parameters.limits.priority", "always yields"}},
		{"a computeLimit past 100 in the share class is refused", deviceClassWith("gpu-share.gpudra.dev", `{"policy":"Guaranteed","computeLimit":1000}`), false,
			[]string{"spec.config[0].opaque.parameters.limits.computeLimit", "between 1 and 100"}},
		{"a computeLimit that overflows an int is refused", deviceClassWith("gpu-share.gpudra.dev", `{"policy":"Guaranteed","computeLimit":1e30}`), false,
			[]string{"spec.config[0].opaque.parameters", "computeLimit"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := Handler{}.Handle(context.Background(), request(t, "DeviceClass", tc.class))
			if resp.Allowed != tc.allowed {
				t.Fatalf("allowed = %v: %s", resp.Allowed, resp.Result.Message)
			}
			for _, w := range tc.want {
				if !strings.Contains(resp.Result.Message, w) {
					t.Errorf("message %q lacks %q", resp.Result.Message, w)
				}
			}
		})
	}
}

// wholeClaimTemplate asks for one device of class with compute "1".
func wholeClaimTemplate(class string) *resourceapi.ResourceClaimTemplate {
	t := &resourceapi.ResourceClaimTemplate{}
	t.Spec.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class,
		Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"compute": resource.MustParse("1")}}}}}
	return t
}

func TestHandler(t *testing.T) {
	tests := []struct {
		name    string
		kind    string
		obj     any
		allowed bool
		want    []string
	}{
		{"a valid time-slicing config is admitted", "ResourceClaim",
			claimWith("gpu.gpudra.dev", `{"apiVersion":"gpu.gpudra.dev/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}}`), true, nil},
		{"a typo in a field is refused with its path", "ResourceClaim",
			claimWith("gpu.gpudra.dev", `{"apiVersion":"gpu.gpudra.dev/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicing":{"intervall":"Long"}}}`), false,
			[]string{"spec.devices.config[0].opaque.parameters", "intervall"}},
		{"an unknown interval names the accepted values", "ResourceClaim",
			claimWith("gpu.gpudra.dev", `{"apiVersion":"gpu.gpudra.dev/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Forever"}}}`), false,
			[]string{"spec.devices.config[0].opaque.parameters.sharing.timeSlicing.interval", "Long"}},
		{"another driver's config is not ours to judge", "ResourceClaim",
			claimWith("other.example.com", `{"anything": true}`), true, nil},
		{"a template is checked at spec.spec", "ResourceClaimTemplate",
			&resourceapi.ResourceClaimTemplate{Spec: resourceapi.ResourceClaimTemplateSpec{Spec: claimWith("gpu.gpudra.dev", `{"apiVersion":"gpu.gpudra.dev/v1alpha2","kind":"GpuConfig"}`).Spec}}, false,
			[]string{"spec.spec.devices.config[0].opaque.parameters.apiVersion", "gpu.gpudra.dev/v1alpha1"}},
		{"a whole GPU asking for compute is refused, naming the field", "ResourceClaimTemplate",
			wholeClaimTemplate("gpu.gpudra.dev"), false,
			[]string{"spec.spec.devices.requests[0].exactly.capacity.requests", "allocated whole", "drop capacity.requests"}},
		{"a MIG-profile class asking for capacity is refused", "ResourceClaimTemplate",
			wholeClaimTemplate("mig-1g.10gb.gpudra.dev"), false, []string{"spec.spec.devices.requests[0].exactly.capacity.requests"}},
		{"a sized NVLink group asking for capacity is refused", "ResourceClaimTemplate",
			wholeClaimTemplate("nvlink-group-4.gpudra.dev"), false, []string{"DeviceClass nvlink-group-4.gpudra.dev selects devices that are allocated whole"}},
		{"a share asking for compute is admitted", "ResourceClaimTemplate", wholeClaimTemplate("gpu-share.gpudra.dev"), true, nil},
		{"another driver's class asking for capacity is not ours to judge", "ResourceClaimTemplate", wholeClaimTemplate("gpu.nvidia.com"), true, nil},
		{"a device class config is checked", "DeviceClass",
			&resourceapi.DeviceClass{Spec: resourceapi.DeviceClassSpec{Config: []resourceapi.DeviceClassConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
				Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "gpu.gpudra.dev", Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"gpu.gpudra.dev/v1alpha1","kind":"Gpu"}`)}}}}}}}, false,
			[]string{"spec.config[0].opaque.parameters.kind", "GpuConfig"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := Handler{}.Handle(context.Background(), request(t, tc.kind, tc.obj))
			if resp.Allowed != tc.allowed {
				t.Fatalf("allowed = %v: %s", resp.Allowed, resp.Result.Message)
			}
			for _, w := range tc.want {
				if !strings.Contains(resp.Result.Message, w) {
					t.Errorf("message %q lacks %q", resp.Result.Message, w)
				}
			}
		})
	}
}

func TestSelfSignedCert(t *testing.T) {
	dir := t.TempDir()
	ca, err := WriteSelfSignedCert(dir, []string{"gpudra-controller.gpudra.svc", "localhost"}, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "tls.crt"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("caBundle is not a PEM certificate")
	}
	for _, name := range []string{"gpudra-controller.gpudra.svc", "127.0.0.1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name}); err != nil {
			t.Errorf("serving cert for %s does not verify against the caBundle: %v", name, err)
		}
	}
	if fi, _ := os.Stat(filepath.Join(dir, "tls.key")); fi.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v", fi.Mode().Perm())
	}
}

// TestInjectCABundle: the CA lands in every webhook of the configuration through a get and
// an update of that one object (the verbs the controller's RBAC grants on it), and a
// configuration that has it already is not written again.
func TestInjectCABundle(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := admissionregistrationv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: ConfigurationName},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "resourceclaims.gpu.gpudra.dev"}, {Name: "deviceclasses.gpu.gpudra.dev"}}}
	updates := 0
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(cfg).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			t.Error("the configuration was patched; the controller may only get and update it")
			return nil
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			updates++
			return c.Update(ctx, obj, opts...)
		},
	}).Build()
	ca := []byte("-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n")
	for range 2 {
		if err := InjectCABundle(context.Background(), c, ConfigurationName, ca); err != nil {
			t.Fatal(err)
		}
	}
	var got admissionregistrationv1.ValidatingWebhookConfiguration
	if err := c.Get(context.Background(), client.ObjectKey{Name: ConfigurationName}, &got); err != nil {
		t.Fatal(err)
	}
	for _, w := range got.Webhooks {
		if string(w.ClientConfig.CABundle) != string(ca) {
			t.Errorf("webhook %s caBundle %q", w.Name, w.ClientConfig.CABundle)
		}
	}
	if updates != 1 {
		t.Errorf("%d updates, want 1 (the second call finds the CA in place)", updates)
	}
	if err := InjectCABundle(context.Background(), c, "missing", ca); err == nil || !strings.Contains(err.Error(), "ValidatingWebhookConfiguration missing") {
		t.Errorf("a missing configuration: err %v, want one naming it", err)
	}
}

// Validate gives each problem of each config as its own field error, with its path.
func TestValidateGivesFieldErrors(t *testing.T) {
	claim := `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":"c"},
	 "spec":{"devices":{"requests":[{"name":"gpu","exactly":{"deviceClassName":"gpu.gpudra.dev"}}],
	  "config":[{"opaque":{"driver":"gpu.gpudra.dev","parameters":{"apiVersion":"gpu.gpudra.dev/v1alpha1","kind":"GpuConfig",
	   "sharing":{"strategy":"MPS","mps":{"defaultActiveThreadPercentage":0}},"limits":{"enforcement":"Maybe"}}}}]}}}`
	errs, err := Validate("ResourceClaim", []byte(claim))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range errs {
		got = append(got, e.Field)
	}
	want := []string{
		"spec.devices.config[0].opaque.parameters.sharing.mps.defaultActiveThreadPercentage",
		"spec.devices.config[0].opaque.parameters.limits.enforcement",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("fields %v, want %v", got, want)
	}
	if errs, err := Validate("Pod", []byte(`{}`)); err != nil || len(errs) > 0 {
		t.Errorf("a Pod: %v, %v; want nothing", errs, err)
	}
}

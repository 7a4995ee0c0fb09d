package helm_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/cel-go/cel"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
)

// The config webhook sees claims and claim templates that carry a gpudra config or ask one
// of gpudra's whole-device classes for capacity (which it refuses: such a device is
// allocated whole), and nothing else; deployments/webhook says the same as the chart.
func TestConfigWebhookSeesCapacityRequestsOfWholeDevices(t *testing.T) {
	chart := render(t).get("ValidatingWebhookConfiguration", "gpudra-config-validation").(*admissionv1.ValidatingWebhookConfiguration)
	data, err := os.ReadFile(filepath.Join("..", "webhook", "config-validation.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := decodeManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	static := plain.get("ValidatingWebhookConfiguration", "gpudra-config-validation").(*admissionv1.ValidatingWebhookConfiguration)

	env, err := cel.NewEnv(cel.Variable("object", cel.DynType))
	if err != nil {
		t.Fatal(err)
	}
	claim := func(class string, capacity bool, firstAvailable bool) resourceapi.ResourceClaimSpec {
		var c *resourceapi.CapacityRequirements
		if capacity {
			c = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"compute": resource.MustParse("1")}}
		}
		r := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, Capacity: c}}
		if firstAvailable {
			r = resourceapi.DeviceRequest{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "a", DeviceClassName: class, Capacity: c}}}
		}
		return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{r}}}
	}
	for _, tc := range []struct {
		what string
		spec resourceapi.ResourceClaimSpec
		want bool
	}{
		{"a whole GPU asking for compute", claim("gpu.gpudra.dev", true, false), true},
		{"an NVLink group asking for capacity among alternatives", claim("nvlink-group-4.gpudra.dev", true, true), true},
		{"a whole GPU asking for no capacity", claim("gpu.gpudra.dev", false, false), false},
		{"a share asking for compute", claim("gpu-share.gpudra.dev", true, false), false},
		{"another driver's class asking for capacity", claim("gpu.nvidia.com", true, false), false},
	} {
		for _, vwc := range []*admissionv1.ValidatingWebhookConfiguration{chart, static} {
			for _, w := range vwc.Webhooks {
				var obj any
				switch w.Name {
				case "resourceclaims.gpu.gpudra.dev":
					obj = &resourceapi.ResourceClaim{Spec: tc.spec}
				case "resourceclaimtemplates.gpu.gpudra.dev":
					obj = &resourceapi.ResourceClaimTemplate{Spec: resourceapi.ResourceClaimTemplateSpec{Spec: tc.spec}}
				default:
					continue
				}
				u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
				if err != nil {
					t.Fatal(err)
				}
				sent := true
				for _, c := range w.MatchConditions {
					ast, iss := env.Compile(c.Expression)
					if iss.Err() != nil {
						t.Fatalf("%s: %q: %v", w.Name, c.Expression, iss.Err())
					}
					prg, err := env.Program(ast)
					if err != nil {
						t.Fatal(err)
					}
					v, _, err := prg.Eval(map[string]any{"object": u})
					if err != nil {
						t.Fatalf("%s, %s: %v", w.Name, tc.what, err)
					}
					sent = sent && v.Value() == true
				}
				if sent != tc.want {
					t.Errorf("%s: %s sent to the webhook = %v, want %v", w.Name, tc.what, sent, tc.want)
				}
			}
		}
	}
}

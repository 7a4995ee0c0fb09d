//go:build e2e

package e2e

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpudra/gpudra/lab"
)

// TestMalformedClaimsAreRejectedReadably sends claims users get wrong to the API server and
// checks the rejection names the field and says what is wrong.
func TestMalformedClaimsAreRejectedReadably(t *testing.T) {
	inLane(t, clusterLane)
	ns := namespace(t, "e2e-validation")
	cases := []struct {
		name, request string
		want          []string
	}{
		{"no device class",
			`{name: gpu, exactly: {count: 1}}`,
			[]string{"spec.devices.requests[0].exactly.deviceClassName", "Required value"}},
		{"CEL that does not compile",
			`{name: gpu, exactly: {deviceClassName: gpu.gpudra.dev, selectors: [{cel: {expression: 'device.attributes["gpu.gpudra.dev"].productName ==='}}]}}`,
			[]string{"spec.devices.requests[0].exactly.selectors[0].cel.expression", "compilation failed"}},
		{"CEL of the wrong type",
			`{name: gpu, exactly: {deviceClassName: gpu.gpudra.dev, selectors: [{cel: {expression: 'device.driver'}}]}}`,
			[]string{"spec.devices.requests[0].exactly.selectors[0].cel.expression", "must evaluate to bool"}},
		{"negative count",
			`{name: gpu, exactly: {deviceClassName: gpu.gpudra.dev, count: -2}}`,
			[]string{"spec.devices.requests[0].exactly.count", "-2"}},
		{"request name that is not a DNS label",
			`{name: My_GPU, exactly: {deviceClassName: gpu.gpudra.dev}}`,
			[]string{"spec.devices.requests[0].name", "My_GPU"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := lab.DecodeManifests([]byte(`
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: malformed, namespace: ` + ns + `}
spec:
  devices:
    requests: [` + tc.request + `]
`))
			if err != nil {
				t.Fatal(err)
			}
			err = createClaim(t, objs[0])
			if err == nil {
				t.Fatal("the API server accepted the claim")
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("rejected as %v, want 422 Invalid", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q does not contain %q", err, w)
				}
			}
		})
	}
}

func createClaim(t *testing.T, o *unstructured.Unstructured) error {
	t.Helper()
	ri := dyn().Resource(claimsGVR).Namespace(o.GetNamespace())
	created, err := ri.Create(t.Context(), o, metav1.CreateOptions{})
	if err == nil {
		_ = ri.Delete(t.Context(), created.GetName(), metav1.DeleteOptions{})
	}
	return err
}

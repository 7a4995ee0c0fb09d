package convert

import (
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/driver/discover"
	"github.com/gpudra/gpudra/driver/nvmlsim"
	"github.com/gpudra/gpudra/driver/simulated"
)

// A claim that selects an existing MIG device by UUID converts, allocates exactly that
// device on a node with static MIG, and selects nothing, without failing, on a node with
// dynamic MIG, whose MIG devices have no UUID.
func TestMIGUUIDSelectorSelectsTheStaticInstance(t *testing.T) {
	b, err := simulated.Open("dgx-h100", "node-static")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := nvmlsim.PartitionMIG(b.NVML, 0, "1g.10gb", "1g.10gb", "3g.40gb"); err != nil {
		t.Fatal(err)
	}
	inv, err := discover.Discover(b)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := driver.Render(inv, driver.RenderOptions{MIG: driver.MIGStatic})
	if err != nil {
		t.Fatal(err)
	}
	static := pool.ResourceSlices("node-static", 1)
	var wantDevice, uuid string
	for _, s := range static {
		for _, d := range s.Spec.Devices {
			if driver.DeviceType(d) == api.TypeMIG && *d.Attributes[api.AttrMIGProfile].StringValue == "1g.10gb" {
				wantDevice, uuid = d.Name, *d.Attributes[api.AttrUUID].StringValue
			}
		}
	}
	if uuid == "" {
		t.Fatal("no static MIG device with a uuid")
	}

	in := `apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: by-uuid, namespace: ns}
spec:
  devices:
    requests:
    - name: mig
      exactly:
        deviceClassName: mig.nvidia.com
        selectors:
        - cel: {expression: 'device.attributes["gpu.nvidia.com"].uuid == "` + uuid + `"'}
`
	out, res := convertString(t, in, Options{})
	if res.Count(NotConverted) != 0 {
		t.Fatalf("not converted: %v", res.Entries)
	}
	docs := splitDocs(t, []byte(out))
	spec, _ := claimSpec(t, docs[0])
	classes, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	claim := &resourceapi.ResourceClaim{Spec: spec}
	claim.Name, claim.Namespace, claim.UID = "by-uuid", "ns", types.UID("uid-by-uuid")
	results, err := allocation.New(classes, static).Allocate(context.Background(), "node-static", claim)
	if err != nil {
		t.Fatalf("static MIG node: %v\n%s", err, out)
	}
	if got := results[0].Devices.Results; len(got) != 1 || got[0].Device != wantDevice {
		t.Errorf("allocated %v, want %s", got, wantDevice)
	}

	_, dynamic, err := simulated.Slices("dgx-h100", "node-dynamic", driver.RenderOptions{MIG: driver.MIGDynamic})
	if err != nil {
		t.Fatal(err)
	}
	expr := spec.Devices.Requests[0].Exactly.Selectors[0].CEL.Expression
	sel := dracel.GetCompiler(dracel.Features{}).CompileCELExpression(expr, dracel.Options{})
	if sel.Error != nil {
		t.Fatal(sel.Error)
	}
	migs := 0
	for _, s := range dynamic {
		for _, d := range s.Spec.Devices {
			if driver.DeviceType(d) != api.TypeMIG {
				continue
			}
			migs++
			ok, _, err := sel.DeviceMatches(context.Background(), dracel.Device{Driver: s.Spec.Driver, Attributes: d.Attributes, Capacity: d.Capacity})
			if err != nil || ok {
				t.Fatalf("dynamic MIG device %s: matches %v, error %v", d.Name, ok, err)
			}
		}
	}
	if migs == 0 || !strings.Contains(expr, "has(") {
		t.Errorf("%d dynamic MIG devices; expression %s", migs, expr)
	}
}

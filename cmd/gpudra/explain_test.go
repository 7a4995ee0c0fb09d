package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/driver/simulated"
)

func TestExplainPendingClaim(t *testing.T) {
	var objs []runtime.Object
	classes, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range classes {
		objs = append(objs, c)
	}
	for _, n := range []string{"l40s-a", "l40s-b"} {
		_, slices, err := simulated.Slices("l40s-pcie", n, driver.RenderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range slices {
			objs = append(objs, s)
		}
	}
	spec, err := allocation.ParseClaimSpec([]byte(`
devices:
  requests:
  - name: pair
    exactly: {deviceClassName: nvlink-group.gpudra.dev}
`))
	if err != nil {
		t.Fatal(err)
	}
	objs = append(objs, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "tp", UID: "u1"}, Spec: spec})
	var out bytes.Buffer
	if err := explain(context.Background(), &out, fake.NewClientset(objs...), "ml", "claim", "tp", 5); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"claim ml/tp is not allocated; it fits on 0 of 2 nodes", "l40s-a", "request pair: 0 devices here match"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

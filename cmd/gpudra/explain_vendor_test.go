package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/driver/simulated"
	"github.com/gpudra/gpudra/internal/explain"
	"github.com/gpudra/gpudra/topology"
)

// vendorCluster is the DeviceClasses, an L40S node and, with mixed, a node with an NVIDIA
// L40S and an AMD MI210, and claims "two-amd" (two AMD GPUs, pending) and "one-amd" (the
// MI210, allocated; only with mixed).
func vendorCluster(t *testing.T, mixed bool) []runtime.Object {
	t.Helper()
	classes, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	for _, c := range classes {
		objs = append(objs, c)
	}
	_, sl, err := simulated.Slices("l40s-pcie", "l40s-a", driver.RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	amd := ""
	if mixed {
		_, m, err := simulated.KFDSlices("mixed-l40s-mi210", "mixed-b", driver.RenderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sl = append(sl, m...)
		for _, s := range m {
			for _, d := range s.Spec.Devices {
				if info, err := api.ReadDevice(&d); err == nil && info.Type == api.TypeGPU && info.Vendor == api.VendorAMD {
					amd = d.Name
				}
			}
		}
		if amd == "" {
			t.Fatal("the mixed node publishes no AMD GPU")
		}
	}
	for _, s := range sl {
		objs = append(objs, s)
	}
	claim := func(name, yaml string) *resourceapi.ResourceClaim {
		spec, err := allocation.ParseClaimSpec([]byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID("u-" + name)}, Spec: spec}
	}
	objs = append(objs, claim("two-amd", `
devices:
  requests:
  - name: gpus
    exactly: {deviceClassName: amd-gpu.gpudra.dev, count: 2}
`))
	if mixed {
		one := claim("one-amd", `
devices:
  requests:
  - name: gpu
    exactly: {deviceClassName: amd-gpu.gpudra.dev}
`)
		one.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "gpu", Driver: api.DriverName, Pool: "mixed-b", Device: amd}}}}
		objs = append(objs, one)
	}
	return objs
}

// A pool that mixes vendors names each node's and each allocated device's vendor; a pool
// of one vendor is shown as before.
func TestExplainNamesVendorsInAMixedPool(t *testing.T) {
	ctx := context.Background()
	var out bytes.Buffer
	kube := fake.NewClientset(vendorCluster(t, true)...)
	if err := explainText(ctx, &out, kube, "ml", "claim", "two-amd", 5); err != nil {
		t.Fatal(err)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^NODE\s+FITS\s+VENDOR\s+WHY$`),
		regexp.MustCompile(`(?m)^mixed-b\s+false\s+NVIDIA,AMD\s+request gpus: 1 devices here match`),
		regexp.MustCompile(`(?m)^l40s-a\s+false\s+NVIDIA\s+request gpus: 0 devices here match`),
	} {
		if !want.MatchString(out.String()) {
			t.Errorf("output does not match %s:\n%s", want, out.String())
		}
	}

	out.Reset()
	if err := explainText(ctx, &out, kube, "ml", "claim", "one-amd", 5); err != nil {
		t.Fatal(err)
	}
	if want := regexp.MustCompile(`(?m)^  request gpu: gpu\.gpudra\.dev/mixed-b/\S+ \(AMD\)$`); !want.MatchString(out.String()) {
		t.Errorf("output does not match %s:\n%s", want, out.String())
	}

	rep, err := buildReport(ctx, &clients{kube: kube}, topology.DefaultLabelKeys, "ml", "claim", "two-amd")
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back explain.Report
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if cr := back.Claims[0]; !slices.Equal(cr.Vendors, []string{api.VendorAMD, api.VendorNVIDIA}) || !slices.Equal(cr.NodeVendors["mixed-b"], []string{api.VendorNVIDIA, api.VendorAMD}) {
		t.Errorf("-o json says vendors %v, node vendors %v", cr.Vendors, cr.NodeVendors)
	}

	out.Reset()
	if err := explainText(ctx, &out, fake.NewClientset(vendorCluster(t, false)...), "ml", "claim", "two-amd", 5); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "VENDOR") || !regexp.MustCompile(`(?m)^NODE\s+FITS\s+WHY$`).MatchString(out.String()) {
		t.Errorf("a pool of NVIDIA GPUs alone has a VENDOR column:\n%s", out.String())
	}
}

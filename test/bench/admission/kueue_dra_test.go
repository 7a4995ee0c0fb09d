package main

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueueconfig "sigs.k8s.io/kueue/apis/config/v1beta2"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/kueue/pkg/dra"
	kueueresource "sigs.k8s.io/kueue/pkg/util/resource"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/simulated"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// cachedReader answers Kueue's reads as its informer-backed client does: a List returns deep
// copies of the stored objects (the field selector spec.driver is an index there), a Get a
// deep copy of one. Writes are not needed by the functions measured.
type cachedReader struct {
	client.Client // nil: any other call panics
	slices        []resourceapi.ResourceSlice
	classes       map[string]*resourceapi.DeviceClass
	templates     map[string]*resourceapi.ResourceClaimTemplate
}

func (c *cachedReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	switch o := obj.(type) {
	case *resourceapi.DeviceClass:
		c.classes[key.Name].DeepCopyInto(o)
	case *resourceapi.ResourceClaimTemplate:
		c.templates[key.Name].DeepCopyInto(o)
	default:
		return fmt.Errorf("unexpected Get of %T", obj)
	}
	return nil
}

func (c *cachedReader) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	l, ok := list.(*resourceapi.ResourceSliceList)
	if !ok {
		return fmt.Errorf("unexpected List of %T", list)
	}
	var o client.ListOptions
	o.ApplyOptions(opts)
	driverName := ""
	if o.FieldSelector != nil {
		driverName, _ = o.FieldSelector.RequiresExactMatch("spec.driver")
	}
	l.Items = nil
	for i := range c.slices {
		if driverName == "" || c.slices[i].Spec.Driver == driverName {
			l.Items = append(l.Items, *c.slices[i].DeepCopy())
		}
	}
	return nil
}

// BenchmarkKueueDRAPreprocessing measures what Kueue v0.19.2 does for each reconcile of a
// pending Workload whose claims name a DeviceClass of gpudra's Kueue configuration (the
// workload controller, before the Workload is queued): its count and consumable-capacity
// passes, which list every ResourceSlice of the driver and match every device against the
// mapping's, the class's and the request's selectors. It runs Kueue's own functions
// (sigs.k8s.io/kueue/pkg/dra) on the slices gpudra's plugin publishes for DGX H100 nodes, with
// a cached client that copies objects as Kueue's informer cache does.
//
// The cost grows with the cluster's devices, not with the Workload: one reconcile takes it
// once. nodes × publication shows the lever gpudra has, how many devices a node publishes
// (--publish: all 23, training 15, whole 8).
func BenchmarkKueueDRAPreprocessing(b *testing.B) {
	mapper, countMapper := kueueMapper(b, deployments.KueueWholeGPUQuotaPercent), kueueMapper(b, deployments.KueueWholeGPUQuotaCount)
	classList, err := deployments.DeviceClasses()
	if err != nil {
		b.Fatal(err)
	}
	classes := map[string]*resourceapi.DeviceClass{}
	for _, c := range classList {
		classes[c.Name] = c
	}
	templates := map[string]*resourceapi.ResourceClaimTemplate{
		"one-gpu": {Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: api.DeviceClassGPU, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}}}}}},
		"share-25": {Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: api.DeviceClassShare, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
				Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
					api.CapCompute: resource.MustParse("25"), api.CapMemory: resource.MustParse("20000Mi")}}}}}}}}},
	}
	workload := func(template string) *kueue.Workload {
		return &kueue.Workload{Spec: kueue.WorkloadSpec{PodSets: []kueue.PodSet{{Name: "main", Count: 1,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{
				{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)}}}}}}}}
	}
	for _, nodes := range []int{64, 512} {
		for _, pub := range []driver.Publication{driver.PublishAll, driver.PublishTraining, driver.PublishWhole} {
			opts, err := pub.Options(driver.RenderOptions{})
			if err != nil {
				b.Fatal(err)
			}
			reader := &cachedReader{classes: classes, templates: templates}
			devices := 0
			for n := range nodes {
				_, rs, err := simulated.Slices("dgx-h100", fmt.Sprintf("n%03d", n), opts)
				if err != nil {
					b.Fatal(err)
				}
				for _, s := range rs {
					reader.slices = append(reader.slices, *s)
					devices += len(s.Spec.Devices)
				}
			}
			for _, template := range []string{"one-gpu", "share-25"} {
				if template == "share-25" && pub != driver.PublishAll {
					continue // no share devices published
				}
				wl := workload(template)
				b.Run(fmt.Sprintf("nodes=%d/publish=%s/claim=%s", nodes, pub, template), func(b *testing.B) {
					for b.Loop() {
						if charges := kueueCharges(b, reader, mapper, wl); charges.Name(api.QuotaGPUPercent, resource.DecimalSI).IsZero() {
							b.Fatalf("Kueue charged nothing to %s for %s: %v", api.QuotaGPUPercent, template, charges)
						}
					}
					b.ReportMetric(float64(devices), "devices")
				})
			}
			if pub != driver.PublishAll {
				continue
			}
			// Whole GPUs charged by count to a resource of their own: no capacity pass.
			wl, one := workload("one-gpu"), resource.MustParse("1")
			b.Run(fmt.Sprintf("nodes=%d/publish=%s/claim=one-gpu/quota=count", nodes, pub), func(b *testing.B) {
				for b.Loop() {
					if charges := kueueCharges(b, reader, countMapper, wl); !charges[countResource].Equal(one) {
						b.Fatalf("Kueue charged %v for one whole GPU, want 1 %s", charges, countResource)
					}
				}
				b.ReportMetric(float64(devices), "devices")
			})
		}
	}
}

// countResource is the resource whole GPUs are charged to by count.
const countResource = corev1.ResourceName(api.QuotaGPU)

// kueueMapper is Kueue's device-class mapper for gpudra's Kueue configuration with whole
// GPUs charged as quota says (deployments.KueueWholeGPUQuotas).
func kueueMapper(b *testing.B, quota string) *dra.ResourceMapper {
	m, err := deployments.KueueConfigurationFor(quota)
	if err != nil {
		b.Fatal(err)
	}
	data, err := sigsyaml.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	var cfg kueueconfig.Configuration
	if err := sigsyaml.UnmarshalStrict(data, &cfg); err != nil {
		b.Fatal(err)
	}
	mapper := dra.NewResourceMapper()
	if err := mapper.PopulateFromConfiguration(cfg.Resources.DeviceClassMappings); err != nil {
		b.Fatal(err)
	}
	return mapper
}

// kueueCharges runs Kueue's count and capacity passes for one reconcile of wl, with a slice
// cache of its own (Kueue makes one per reconcile), and returns the main pod set's charges
// summed over both passes, as Kueue merges them.
func kueueCharges(b *testing.B, reader *cachedReader, mapper *dra.ResourceMapper, wl *kueue.Workload) corev1.ResourceList {
	sliceCache := dra.NewResourceSliceCache(reader)
	counts, errs := dra.GetResourceRequestsForResourceClaimTemplates(b.Context(), reader, sliceCache, mapper, wl)
	if len(errs) > 0 {
		b.Fatal(errs.ToAggregate())
	}
	charges, errs := dra.DetermineCapacityResourcesForWorkload(b.Context(), reader, sliceCache, mapper, wl)
	if len(errs) > 0 {
		b.Fatal(errs.ToAggregate())
	}
	return kueueresource.MergeResourceListKeepSum(counts["main"], charges["main"])
}

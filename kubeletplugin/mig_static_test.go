package kubeletplugin_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/driver/nvmlsim"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

// staticNode is a static-MIG H100 node whose GPUs were partitioned before the plugin
// started, as NVIDIA's mig-manager does: GPU 0 into 3g.40gb, 2g.20gb and two 1g.10gb, GPU
// 1 in MIG mode without instances; the others are not in MIG mode.
func staticNode(t *testing.T, mutate ...func(*plugin.Config)) *node {
	t.Helper()
	return newNode(t, "dgx-h100", append([]func(*plugin.Config){func(c *plugin.Config) {
		c.Render.MIG = driver.MIGStatic
		if err := nvmlsim.PartitionMIG(c.Backend.NVML, 0, "3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"); err != nil {
			t.Fatal(err)
		}
		if err := nvmlsim.PartitionMIG(c.Backend.NVML, 1); err != nil {
			t.Fatal(err)
		}
	}}, mutate...)...)
}

// layout lists every GPU and compute instance on the simulated GPUs, with its ids and
// placement: what a static-MIG plugin must never change.
func (n *node) layout() []string {
	n.t.Helper()
	var out []string
	count, _ := n.backend.NVML.DeviceGetCount()
	for i := range count {
		dev, _ := n.backend.NVML.DeviceGetHandleByIndex(i)
		for id := range nvml.GPU_INSTANCE_PROFILE_COUNT {
			info, ret := dev.GetGpuInstanceProfileInfo(id)
			if ret != nvml.SUCCESS {
				continue
			}
			gis, _ := dev.GetGpuInstances(&info)
			for _, gi := range gis {
				gd, _ := gi.GetInfo()
				for ciProfile := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
					ciInfo, ret := gi.GetComputeInstanceProfileInfo(ciProfile, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
					if ret != nvml.SUCCESS {
						continue
					}
					cis, _ := gi.GetComputeInstances(&ciInfo)
					for _, ci := range cis {
						cd, _ := ci.GetInfo()
						out = append(out, fmt.Sprintf("gpu%d gi%d(profile %d at %d+%d) ci%d(profile %d)", i, gd.Id, id, gd.Placement.Start, gd.Placement.Size, cd.Id, ciProfile))
					}
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// publishedUUID is the uuid attribute of the device the claim was allocated.
func publishedUUID(t *testing.T, pool *driver.Pool, c *resourceapi.ResourceClaim) string {
	t.Helper()
	name := c.Status.Allocation.Devices.Results[0].Device
	for _, s := range pool.Slices {
		for _, d := range s.Devices {
			if d.Name == name {
				if a, ok := d.Attributes[api.AttrUUID]; ok && a.StringValue != nil {
					return *a.StringValue
				}
				t.Fatalf("device %s has no uuid attribute", name)
			}
		}
	}
	t.Fatalf("device %s is not published", name)
	return ""
}

func migProfileClaim(profile string) string {
	return strings.Replace(migClaim, `"1g.10gb"`, fmt.Sprintf("%q", profile), 1)
}

func TestStaticMIGPrepareHandsOutTheExistingInstance(t *testing.T) {
	n := staticNode(t)
	before := n.layout()
	if len(before) != 4 {
		t.Fatalf("layout %v, want GPU 0's 4 instances", before)
	}
	d := n.newDriver(nil)
	for _, profile := range []string{"2g.20gb", "1g.10gb", "3g.40gb"} {
		c := n.allocate(migProfileClaim(profile))
		want := publishedUUID(t, n.pool, c)
		if !strings.HasPrefix(want, "MIG-") {
			t.Fatalf("%s: published uuid %q", profile, want)
		}
		mustPrepare(t, d, c)
		if got := n.layout(); !reflect.DeepEqual(got, before) {
			t.Errorf("%s: MIG instances after prepare %v, want them untouched %v", profile, got, before)
		}
		spec := n.spec(c)
		if spec == nil {
			t.Fatalf("%s: no CDI spec", profile)
		}
		if v := env(spec.Devices[0].ContainerEdits)["GPUDRA_VISIBLE_DEVICES"]; v != want {
			t.Errorf("%s: GPUDRA_VISIBLE_DEVICES=%s, want the instance's UUID %s", profile, v, want)
		}
		if err := unprepare(t, d, c); err != nil {
			t.Fatal(err)
		}
		if got := n.layout(); !reflect.DeepEqual(got, before) {
			t.Errorf("%s: MIG instances after unprepare %v, want them untouched %v", profile, got, before)
		}
		if n.spec(c) != nil {
			t.Errorf("%s: CDI spec left after unprepare", profile)
		}
	}
}

func TestStaticMIGPublishesNoWholeGPUInMIGMode(t *testing.T) {
	n := staticNode(t)
	for _, s := range n.pool.Slices {
		for _, d := range s.Devices {
			typ := driver.DeviceType(d)
			if a, ok := d.Attributes[api.AttrIndex]; ok && (typ == api.TypeGPU || typ == api.TypeShare) && *a.IntValue < 2 {
				t.Errorf("%s published for a GPU in MIG mode", d.Name)
			}
			if a, ok := d.Attributes[api.AttrParentIndex]; ok && *a.IntValue == 1 {
				t.Errorf("%s published for GPU 1, which has no instances", d.Name)
			}
		}
	}
}

func TestStaticMIGRestartWithAPreparedClaimCreatesAndDestroysNothing(t *testing.T) {
	n := staticNode(t)
	before := n.layout()
	d := n.newDriver(nil)
	c := n.allocate(migProfileClaim("2g.20gb"))
	first := mustPrepare(t, d, c)
	d = n.newDriver(nil) // restart
	if got := n.layout(); !reflect.DeepEqual(got, before) {
		t.Errorf("MIG instances after a restart %v, want %v", got, before)
	}
	if again := mustPrepare(t, d, c); !reflect.DeepEqual(again, first) {
		t.Errorf("prepare after restart %+v, want %+v", again, first)
	}
	if n.spec(c) == nil {
		t.Error("the prepared claim lost its CDI spec")
	}
	if err := unprepare(t, d, c); err != nil {
		t.Fatal(err)
	}
	if got := n.layout(); !reflect.DeepEqual(got, before) {
		t.Errorf("MIG instances after unprepare %v, want %v", got, before)
	}
	// A restart without claims does not take the operator's instances for leftovers.
	n.newDriver(nil)
	if got := n.layout(); !reflect.DeepEqual(got, before) {
		t.Errorf("MIG instances after another restart %v, want %v", got, before)
	}
}

func TestStaticMIGClaimOnAnInstanceGoneFailsAndCreatesNone(t *testing.T) {
	n := staticNode(t)
	d := n.newDriver(nil)
	c := n.allocate(migProfileClaim("2g.20gb"))
	p := n.allocatedPlacement(c)
	for _, gi := range giHandles(t, n, p.gpu) {
		if info, _ := gi.GetInfo(); int(info.Placement.Start) == p.start {
			destroyGI(t, gi)
		}
	}
	before := n.layout()
	_, err := prepare(t, d, c)
	if err == nil || !strings.Contains(err.Error(), "does not exist any more") {
		t.Errorf("prepare error %v, want one saying the instance does not exist any more", err)
	}
	if got := n.layout(); !reflect.DeepEqual(got, before) {
		t.Errorf("MIG instances after the failed prepare %v, want %v", got, before)
	}
	if n.spec(c) != nil || checkpointClaims(t, n) != 0 {
		t.Error("the failed prepare left a CDI spec or a checkpoint entry")
	}
}

func destroyGI(t *testing.T, gi nvml.GpuInstance) {
	t.Helper()
	for ciProfile := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		info, ret := gi.GetComputeInstanceProfileInfo(ciProfile, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			continue
		}
		cis, _ := gi.GetComputeInstances(&info)
		for _, ci := range cis {
			ci.Destroy()
		}
	}
	if ret := gi.Destroy(); ret != nvml.SUCCESS {
		t.Fatalf("destroying a GPU instance: %v", ret)
	}
}

// migNames are the published MIG devices' names.
func migNames(pool *driver.Pool) []string {
	var out []string
	for _, s := range pool.Slices {
		for _, d := range s.Devices {
			if driver.DeviceType(d) == api.TypeMIG {
				out = append(out, d.Name)
			}
		}
	}
	slices.Sort(out)
	return out
}

func TestStaticMIGRepartitionWhileRunningIsRepublished(t *testing.T) {
	n := staticNode(t, func(c *plugin.Config) { c.MIGLayoutInterval = 10 * time.Millisecond })
	d := n.newDriver(nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); d.Stop() })
	plugin.WatchMIGLayout(ctx, d)
	held := n.allocate(migProfileClaim("1g.10gb"))
	heldPlacement := n.allocatedPlacement(held)
	mustPrepare(t, d, held)
	want := []string{"gpu-0-mig-1g10gb-0", "gpu-0-mig-1g10gb-1", "gpu-0-mig-2g20gb-2", "gpu-0-mig-3g40gb-4"}
	if got := migNames(d.Pool()); !reflect.DeepEqual(got, want) {
		t.Fatalf("published MIG devices %v, want %v", got, want)
	}

	// Someone partitions GPU 1 and destroys GPU 0's instances, the claim's included.
	if err := nvmlsim.PartitionMIG(n.backend.NVML, 1, "4g.40gb", "1g.10gb"); err != nil {
		t.Fatal(err)
	}
	for _, gi := range giHandles(t, n, 0) {
		destroyGI(t, gi)
	}
	before := n.layout()
	want = []string{"gpu-1-mig-1g10gb-6", "gpu-1-mig-4g40gb-0"}
	deadline := time.Now().Add(10 * time.Second)
	for !reflect.DeepEqual(migNames(d.Pool()), want) {
		if time.Now().After(deadline) {
			t.Fatalf("published MIG devices %v, want %v after the GPUs were partitioned again", migNames(d.Pool()), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := n.layout(); !reflect.DeepEqual(got, before) {
		t.Errorf("MIG instances after the republish %v, want what the operator left %v", got, before)
	}
	// The claim whose instance went stays prepared: the plugin re-creates nothing.
	if n.spec(held) == nil || checkpointClaims(t, n) != 1 {
		t.Error("the claim whose instance went is no longer prepared")
	}
	for _, p := range n.migInstances() {
		if p == heldPlacement {
			t.Errorf("the claim's instance at %+v was re-created", p)
		}
	}

	// The new instances are allocated and prepared as published now.
	classes, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	n.pool = d.Pool()
	n.alloc = allocation.New(classes, n.pool.ResourceSlices(nodeName, 2))
	c := n.allocate(migProfileClaim("4g.40gb"))
	mustPrepare(t, d, c)
	if v, want := env(n.spec(c).Devices[0].ContainerEdits)["GPUDRA_VISIBLE_DEVICES"], publishedUUID(t, n.pool, c); v != want {
		t.Errorf("GPUDRA_VISIBLE_DEVICES=%s, want the new instance's UUID %s", v, want)
	}
	if err := unprepare(t, d, held); err != nil {
		t.Fatalf("unpreparing the claim whose instance went: %v", err)
	}
	if err := unprepare(t, d, c); err != nil {
		t.Fatal(err)
	}
	if got := n.layout(); !reflect.DeepEqual(got, before) {
		t.Errorf("MIG instances after the unprepares %v, want %v", got, before)
	}
	if changed, err := plugin.RefreshMIGLayout(ctx, d); changed || err != nil {
		t.Errorf("a layout check with nothing changed: changed %v, %v", changed, err)
	}
}

// staticCrashClaims are the static-MIG claims the crash tests prepare and unprepare.
var staticCrashClaims = []struct{ name, spec string }{
	{"mig", migProfileClaim("2g.20gb")},
	{"mig-mps", migProfileClaim("1g.10gb") + withConfig("mig", "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: MigConfig\nsharing: {strategy: MPS}")},
}

func TestStaticMIGCrashAtEachStepLeavesTheInstancesAlone(t *testing.T) {
	exercised := 0
	for _, cl := range staticCrashClaims {
		for _, point := range plugin.PreparePoints {
			t.Run("prepare/"+cl.name+"/"+point, func(t *testing.T) {
				n := staticNode(t)
				before := n.layout()
				c := n.allocate(cl.spec)
				var reached bool
				if !run(t, func() { _, _ = prepare(t, n.newDriver(crashAt(point, &reached)), c) }) {
					return // a static claim never reaches the point
				}
				exercised++
				d := n.newDriver(nil)
				if got := n.layout(); !reflect.DeepEqual(got, before) {
					t.Errorf("MIG instances after the restart %v, want %v", got, before)
				}
				if prepared := n.spec(c) != nil; prepared != (point == plugin.PointPrepareCompleted) {
					t.Errorf("CDI spec after the restart: %v", prepared)
				}
				mustPrepare(t, d, c)
				if err := unprepare(t, d, c); err != nil {
					t.Fatal(err)
				}
				if got := n.layout(); !reflect.DeepEqual(got, before) {
					t.Errorf("MIG instances after prepare and unprepare %v, want %v", got, before)
				}
				if n.spec(c) != nil || len(n.daemons(t)) != 0 {
					t.Error("leaked a CDI spec or an MPS control daemon")
				}
			})
		}
		for _, point := range plugin.UnpreparePoints {
			t.Run("unprepare/"+cl.name+"/"+point, func(t *testing.T) {
				n := staticNode(t)
				before := n.layout()
				c := n.allocate(cl.spec)
				var reached bool
				d := n.newDriver(crashAt(point, &reached))
				mustPrepare(t, d, c)
				if !run(t, func() { _ = unprepare(t, d, c) }) {
					if slices.Contains(plugin.TimeSlicePoints, point) {
						return // a MIG device has no time-slice to give back
					}
					t.Fatalf("unprepare never reached %s", point)
				}
				exercised++
				d = n.newDriver(nil)
				if got := n.layout(); !reflect.DeepEqual(got, before) {
					t.Errorf("MIG instances after the restart %v, want %v", got, before)
				}
				if err := unprepare(t, d, c); err != nil {
					t.Fatalf("retried unprepare: %v", err)
				}
				if got := n.layout(); !reflect.DeepEqual(got, before) {
					t.Errorf("MIG instances after the unprepare %v, want %v", got, before)
				}
				if n.spec(c) != nil || len(n.daemons(t)) != 0 {
					t.Error("leaked a CDI spec or an MPS control daemon")
				}
			})
		}
	}
	// Every point but the creation of an instance and those of time-slices is reached.
	if want := len(staticCrashClaims) * (len(plugin.PreparePoints) - 1 + len(plugin.UnpreparePoints) - len(plugin.TimeSlicePoints)); exercised < want-len(staticCrashClaims) {
		t.Errorf("only %d crash points exercised, want about %d", exercised, want)
	}
}

package kubeletplugin_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/driver"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

// migModeOn is a dynamic-MIG node whose GPU 0 is in MIG mode already.
func migModeOn(t *testing.T) *node {
	t.Helper()
	return newNode(t, "dgx-h100", func(c *plugin.Config) {
		c.Render.MIG = driver.MIGDynamic
		dev, ret := c.Backend.NVML.DeviceGetHandleByIndex(0)
		if ret != nvml.SUCCESS {
			t.Fatalf("GPU 0: %v", ret)
		}
		if _, ret := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
			t.Fatalf("GPU 0: SetMigMode: %v", ret)
		}
	})
}

// createInstance makes a 1g.10gb GPU instance at p outside gpudra, as nvidia-smi mig -cgi
// would.
func createInstance(t *testing.T, n *node, p placement) {
	t.Helper()
	dev, _ := n.backend.NVML.DeviceGetHandleByIndex(p.gpu)
	info, ret := dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	if ret != nvml.SUCCESS {
		t.Fatalf("GetGpuInstanceProfileInfo: %v", ret)
	}
	if _, ret := dev.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(p.start), Size: uint32(p.size)}); ret != nvml.SUCCESS {
		t.Fatalf("CreateGpuInstanceWithPlacement at %+v: %v", p, ret)
	}
}

// A MIG claim whose placement an instance made outside gpudra occupies fails, saying
// so, and the instance stays: a prepare destroys only the instances it created.
func TestMIGPrepareAtAnOccupiedPlacementLeavesTheInstanceAlone(t *testing.T) {
	n := migModeOn(t)
	d := n.newDriver(nil)
	c := n.allocate(migClaim)
	p := n.allocatedPlacement(c)
	createInstance(t, n, p)

	_, err := prepare(t, d, c)
	if got := n.migInstances(); !reflect.DeepEqual(got, []placement{p}) {
		t.Errorf("MIG instances after the failed prepare %v, want the one made outside gpudra %v", got, p)
	}
	if err == nil || !strings.Contains(err.Error(), "overlaps an existing 1g.10gb GPU instance") || !strings.Contains(err.Error(), "nvidia-smi mig -dgi") {
		t.Errorf("prepare error %v, want one saying the placement is occupied and how to free it", err)
	}
	if n.spec(c) != nil || checkpointClaims(t, n) != 0 {
		t.Error("the failed prepare left a CDI spec or a checkpoint entry")
	}
}

// A prepare that created its MIG instance and then failed destroys that instance.
func TestFailedMIGPrepareDestroysTheInstanceItCreated(t *testing.T) {
	n := migModeOn(t)
	c := n.allocate(migClaim)
	d := n.newDriver(func(point string) error {
		if point == plugin.PointCDIWritten {
			return errCDIWrite
		}
		return nil
	})
	if _, err := prepare(t, d, c); err == nil {
		t.Fatal("prepare succeeded")
	}
	if got := n.migInstances(); len(got) != 0 {
		t.Errorf("MIG instances after the failed prepare %v, want none", got)
	}
	assertClean(t, n, c)
}

var errCDIWrite = errors.New("disk full")

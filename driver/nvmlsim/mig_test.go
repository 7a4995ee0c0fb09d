package nvmlsim_test

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/driver/nvmlsim"
)

func TestPartitionMIGMakesMIGDevices(t *testing.T) {
	lib, _, err := nvmlsim.Open("dgx-h100", "n")
	if err != nil {
		t.Fatal(err)
	}
	if err := nvmlsim.PartitionMIG(lib, 1, "3g.40gb", "1g.10gb"); err != nil {
		t.Fatal(err)
	}
	dev, _ := lib.DeviceGetHandleByIndex(1)
	if mode, _, _ := dev.GetMigMode(); mode != nvml.DEVICE_MIG_ENABLE {
		t.Errorf("MIG mode %d after partitioning, want enabled", mode)
	}
	gpuUUID, _ := dev.GetUUID()
	max, ret := dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS || max != 7 {
		t.Fatalf("GetMaxMigDeviceCount %d, %v; want 7", max, ret)
	}
	var found []string
	for k := range max {
		md, ret := dev.GetMigDeviceHandleByIndex(k)
		if ret == nvml.ERROR_NOT_FOUND {
			continue
		}
		if ret != nvml.SUCCESS {
			t.Fatalf("GetMigDeviceHandleByIndex(%d): %v", k, ret)
		}
		gi, _ := md.GetGpuInstanceId()
		ci, _ := md.GetComputeInstanceId()
		id, _ := md.GetUUID()
		if id != nvmlsim.MIGDeviceUUID(gpuUUID, gi, ci) {
			t.Errorf("MIG device %d: uuid %s", k, id)
		}
		if parent, _ := md.GetDeviceHandleFromMigDeviceHandle(); parent != dev {
			t.Errorf("MIG device %d: parent %v", k, parent)
		}
		a, _ := md.GetAttributes()
		mem, _ := md.GetMemoryInfo()
		if a.MultiprocessorCount == 0 || mem.Total == 0 {
			t.Errorf("MIG device %d: attributes %+v, memory %+v", k, a, mem)
		}
		found = append(found, id)
	}
	if len(found) != 2 {
		t.Errorf("MIG devices %v, want 2", found)
	}
	// GPUs left alone have none.
	other, _ := lib.DeviceGetHandleByIndex(0)
	if md, ret := other.GetMigDeviceHandleByIndex(0); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("GPU 0's MIG device 0: %v, %v; want ERROR_NOT_FOUND", md, ret)
	}
}

func TestPartitionMIGRefusesWhatDoesNotFit(t *testing.T) {
	lib, _, err := nvmlsim.Open("dgx-h100", "n")
	if err != nil {
		t.Fatal(err)
	}
	if err := nvmlsim.PartitionMIG(lib, 0, "2g.25gb"); err == nil || !strings.Contains(err.Error(), "1g.10gb") {
		t.Errorf("unknown profile: %v, want an error listing the GPU's profiles", err)
	}
	if err := nvmlsim.PartitionMIG(lib, 0, "7g.80gb", "1g.10gb"); err == nil || !strings.Contains(err.Error(), "no free placement") {
		t.Errorf("a full GPU: %v, want no free placement", err)
	}
	v100, _, err := nvmlsim.Open("dgx-v100", "n")
	if err != nil {
		t.Fatal(err)
	}
	if err := nvmlsim.PartitionMIG(v100, 0, "1g.10gb"); err == nil {
		t.Error("partitioned a GPU without MIG")
	}
}

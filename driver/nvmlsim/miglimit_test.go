package nvmlsim

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// A profile with the media engines (1g.10gb+me, NVML's 1-slice REV1) has a placement on
// every slice but one instance per GPU, as on real GPUs.
func TestMediaEngineProfileHoldsOneInstancePerGPU(t *testing.T) {
	for _, profile := range []string{"dgx-a100", "dgx-h100"} {
		t.Run(profile, func(t *testing.T) {
			d, _ := open(t, profile, "n").DeviceGetHandleByIndex(0)
			if _, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
				t.Fatalf("SetMigMode: %v", ret)
			}
			info, ret := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1)
			if ret != nvml.SUCCESS || info.InstanceCount != 1 {
				t.Fatalf("1g+me profile: %v, instance count %d", ret, info.InstanceCount)
			}
			placements, _ := d.GetGpuInstancePossiblePlacements(&info)
			if len(placements) < 2 {
				t.Fatalf("1g+me placements = %v, want several", placements)
			}
			first, ret := d.CreateGpuInstanceWithPlacement(&info, &placements[0])
			if ret != nvml.SUCCESS {
				t.Fatalf("the first 1g+me instance: %v", ret)
			}
			if _, ret := d.CreateGpuInstanceWithPlacement(&info, &placements[1]); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
				t.Errorf("a second 1g+me instance at a free placement = %v, want ERROR_INSUFFICIENT_RESOURCES", ret)
			}
			if _, ret := d.CreateGpuInstance(&info); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
				t.Errorf("a second 1g+me instance anywhere = %v, want ERROR_INSUFFICIENT_RESOURCES", ret)
			}
			plain, _ := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
			if _, ret := d.CreateGpuInstanceWithPlacement(&plain, &nvml.GpuInstancePlacement{Start: placements[1].Start, Size: 1}); ret != nvml.SUCCESS {
				t.Errorf("a 1g instance beside the 1g+me one: %v", ret)
			}
			if first.Destroy() != nvml.SUCCESS {
				t.Fatal("destroy failed")
			}
			if _, ret := d.CreateGpuInstanceWithPlacement(&info, &placements[0]); ret != nvml.SUCCESS {
				t.Errorf("a 1g+me instance once the first is gone: %v", ret)
			}
		})
	}
}

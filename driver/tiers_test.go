package driver_test

import (
	"fmt"
	"testing"

	"github.com/gpudra/gpudra/driver"
)

// shareOnGPU0 asks for a share of GPU 0 with the given memory and compute ("" asks for none).
func shareOnGPU0(memory, compute string) string {
	c := ""
	if compute != "" {
		c = fmt.Sprintf(", compute: %q", compute)
	}
	return fmt.Sprintf(`
devices:
  requests:
  - name: share
    exactly:
      deviceClassName: gpu-share.gpudra.dev
      selectors: [{cel: {expression: 'device.attributes["gpu.gpudra.dev"].index == 0'}}]
      capacity: {requests: {memory: %s%s}}`, memory, c)
}

// The scheduler reserves a share's compute request, a Guaranteed share's floor: the floors
// of one GPU fill it to 100 % and no further, whatever caps their configs set above them,
// while BestEffort shares, which reserve none, still fit beside them.
func TestGuaranteedFloorsFillAGPUToAHundredPercent(t *testing.T) {
	inv := simInventory(t, "dgx-h100", "n")
	st := newState(t, render(t, inv, "n", driver.RenderOptions{}))
	for _, floor := range []string{"40", "30", "30"} {
		mustAllocate(t, st, "n", shareOnGPU0("8Gi", floor))
	}
	mustNotFit(t, st, "n", "the floors of GPU 0 are 100 %", shareOnGPU0("8Gi", "1"))
	for range 3 {
		mustAllocate(t, st, "n", shareOnGPU0("8Gi", ""))
	}
	mustNotFit(t, st, "n", "a share reserves its memory even without compute", shareOnGPU0("60Gi", ""))
}

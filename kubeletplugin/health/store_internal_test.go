package health

import (
	"testing"

	"github.com/gpudra/gpudra/driver"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

func TestHealthyAgain(t *testing.T) {
	inv := &driver.Inventory{
		GPUs:       []driver.GPU{{Index: 0, UUID: "GPU-a"}, {Index: 1, UUID: "GPU-b"}},
		Unreadable: []driver.UnreadableGPU{{Index: 2, Call: "GetMemoryInfo", Return: "ERROR_GPU_IS_LOST"}},
	}
	rec := func(index int, uuid, boot, value string) Unhealthy {
		return Unhealthy{Index: index, UUID: uuid, BootID: boot, Taint: Taint{Key: api.TaintUnhealthy, Value: value, Effect: "NoExecute"}}
	}
	tests := []struct {
		name    string
		rec     Unhealthy
		cleared bool
	}{
		{"a fault of this boot on a GPU NVML reads stays", rec(1, "GPU-b", "boot-1", "xid-79"), false},
		{"a fault of an earlier boot on a GPU NVML reads clears", rec(1, "GPU-b", "boot-0", "xid-79"), true},
		{"a lost-GPU taint on a GPU NVML reads clears", rec(0, "GPU-a", "boot-1", lostTaintValue), true},
		{"a lost-GPU taint on a GPU NVML cannot read stays", rec(2, "GPU-c", "boot-1", lostTaintValue), false},
		{"a fault of an earlier boot on a GPU NVML cannot read stays", rec(2, "GPU-c", "boot-0", "xid-79"), false},
		{"a fault of an earlier boot on a GPU that left the node clears", rec(3, "GPU-d", "boot-0", "xid-79"), true},
		{"a fault of this boot on a GPU not discovered stays", rec(3, "GPU-d", "boot-1", "xid-79"), false},
		{"records match GPUs by UUID, not index", rec(1, "GPU-a", "boot-1", lostTaintValue), true},
		{"a GPU with another UUID at the index is not the record's", rec(1, "GPU-x", "boot-1", lostTaintValue), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if why := healthyAgain(tc.rec, inv, "boot-1"); (why != "") != tc.cleared {
				t.Errorf("healthyAgain(%+v) = %q, want cleared %v", tc.rec, why, tc.cleared)
			}
		})
	}
}

package kubeletplugin_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

// onGPU says whether a device of this driver named name is on GPU gpu (a whole GPU, a
// share or a MIG device of it, or an NVLink group with it).
func onGPU(name string, gpu int) bool {
	g := fmt.Sprint(gpu)
	if rest, ok := strings.CutPrefix(name, "gpu-"); ok {
		num, _, _ := strings.Cut(rest, "-")
		return num == g
	}
	if rest, ok := strings.CutPrefix(name, "nvlink-"); ok {
		for _, m := range strings.Split(rest, "-") {
			if m == g {
				return true
			}
		}
	}
	return false
}

// The scheduler allocates a claim on GPU 2 while the layout reads the allocated claims
// and withdraws the GPUs it repartitions. The claim's kubelet asks to prepare it in that
// window. The layout reads the claims again once the API server's slices lack the GPUs'
// devices, finds the claim, and gives up: GPU 2 is never repartitioned, its devices come
// back, the prepare refused in the window works on the kubelet's next try.
func TestMIGLayoutGivesUpForAClaimAllocatedWhileItsGPUIsWithdrawn(t *testing.T) {
	late := allocatedClaim("late", api.DriverName, nodeName, "gpu-2")
	late.UID = types.UID("late-uid")
	var (
		driverOf  atomic.Pointer[plugin.Driver]
		mu        sync.Mutex
		lists     int
		published []string // GPU 2's devices on the API server at the second read
		prepErr   error    // the prepare in the window
	)
	c := layoutCluster(t, "dgx-h100", func(cfg *plugin.Config) {
		client := cfg.Client.(*fake.Clientset)
		client.PrependReactor("list", "resourceclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
			mu.Lock()
			defer mu.Unlock()
			if lists++; lists != 2 {
				return false, nil, nil
			}
			// The second read: the layout's GPUs are withdrawn, and the claim was
			// allocated from the slices the scheduler saw before.
			slices, err := client.Tracker().List(resourceapi.SchemeGroupVersion.WithResource("resourceslices"), resourceapi.SchemeGroupVersion.WithKind("ResourceSlice"), "")
			if err != nil {
				t.Error(err)
			}
			for _, s := range slices.(*resourceapi.ResourceSliceList).Items {
				for _, dev := range s.Spec.Devices {
					if onGPU(dev.Name, 2) {
						published = append(published, dev.Name)
					}
				}
			}
			if err := client.Tracker().Add(late.DeepCopy()); err != nil {
				t.Error(err)
			}
			done := make(chan error, 1)
			go func() {
				out, err := driverOf.Load().PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{late.DeepCopy()})
				if err == nil {
					err = out[late.UID].Err
				}
				done <- err
			}()
			select {
			case prepErr = <-done:
			case <-time.After(5 * time.Second):
				prepErr = fmt.Errorf("the prepare did not answer within 5 s")
			}
			return false, nil, nil
		})
	})
	driverOf.Store(c.d)
	c.label(api.LabelMIGConfig, "all-1g.10gb")
	c.waitForEvent(plugin.ReasonMIGLayoutFailed, `MIG layout "all-1g.10gb" is not applied and no GPU was changed`,
		"GPU 2 (claims team-a/late)", "the devices are published again")
	mu.Lock()
	if lists < 2 {
		t.Fatalf("the allocated claims were read %d times, want a second read after the withdrawal", lists)
	}
	if len(published) > 0 {
		t.Errorf("the claims were read again while the API server still published GPU 2's devices %v", published)
	}
	if prepErr == nil || !strings.Contains(prepErr.Error(), `GPU 2, which MIG layout "all-1g.10gb" is repartitioning`) {
		t.Errorf("the prepare in the window: %v, want it refused for GPU 2's repartitioning", prepErr)
	}
	mu.Unlock()

	// The next pass leaves GPU 2 to its claim and repartitions the others.
	c.waitForState(api.MIGConfigPending)
	c.waitForEvent(plugin.ReasonMIGLayoutPending, "GPU 2 (claims team-a/late)")
	if got, ok := c.n.gpuProfiles()[2]; ok {
		t.Errorf("GPU 2, allocated to a claim, was repartitioned: %v", got)
	}
	c.waitForSlices(func(devs map[string]resourceapi.Device) bool {
		_, whole := devs["gpu-2"]
		return whole
	})
	if devs, err := prepare(t, c.d, late); err != nil || len(devs) != 1 || devs[0].DeviceName != "gpu-2" {
		t.Errorf("the kubelet's next prepare: %v, %v; want gpu-2", devs, err)
	}
}

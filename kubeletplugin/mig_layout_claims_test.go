package kubeletplugin_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/driver"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

// allocatedClaim is a ResourceClaim the scheduler allocated device on the node (in this
// driver's pool, or another's), not prepared yet.
func allocatedClaim(name, driverName, pool, device string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "gpu", Driver: driverName, Pool: pool, Device: device},
			}},
		}},
	}
}

func TestMIGLayoutWaitsForClaimsAllocatedButNotPrepared(t *testing.T) {
	for _, tc := range []struct {
		name    string
		claim   *resourceapi.ResourceClaim
		pending int
	}{
		{"a whole GPU", allocatedClaim("whole", api.DriverName, nodeName, "gpu-2"), 2},
		{"a share", allocatedClaim("share", api.DriverName, nodeName, "gpu-5-share"), 5},
		{"an NVLink group", allocatedClaim("group", api.DriverName, nodeName, "nvlink-4-6"), 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := layoutCluster(t, "dgx-h100")
			ctx := context.Background()
			if _, err := c.client.ResourceV1().ResourceClaims("team-a").Create(ctx, tc.claim, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			// Claims of another node or driver hold nothing here.
			for _, other := range []*resourceapi.ResourceClaim{
				allocatedClaim("elsewhere", api.DriverName, "node-b", "gpu-0"),
				allocatedClaim("other-driver", "gpu.example.com", nodeName, "gpu-1"),
			} {
				if _, err := c.client.ResourceV1().ResourceClaims("team-a").Create(ctx, other, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			c.label(api.LabelMIGConfig, "all-1g.10gb")
			c.waitForState(api.MIGConfigPending)
			c.waitForEvent(plugin.ReasonMIGLayoutPending, fmt.Sprintf("GPU %d (claims team-a/%s)", tc.pending, tc.claim.Name))
			got := c.n.gpuProfiles()
			if profiles, ok := got[tc.pending]; ok {
				t.Errorf("GPU %d, allocated to a claim, was repartitioned: %v", tc.pending, profiles)
			}
			for _, gpu := range []int{0, 1, 7} {
				if want := repeat("1g.10gb", 7); !reflect.DeepEqual(got[gpu], want) {
					t.Errorf("GPU %d: %v, want %v", gpu, got[gpu], want)
				}
			}

			// Once the claim is deallocated (deleted), the GPU follows.
			if err := c.client.ResourceV1().ResourceClaims("team-a").Delete(ctx, tc.claim.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			c.waitForState(api.MIGConfigSuccess)
			if got := c.n.gpuProfiles()[tc.pending]; !reflect.DeepEqual(got, repeat("1g.10gb", 7)) {
				t.Errorf("GPU %d after its claim went: %v", tc.pending, got)
			}
		})
	}
}

func TestMIGLayoutNotAppliedWhenTheClaimsCannotBeRead(t *testing.T) {
	// The reactor goes in before the plugin starts: the fake client's reactor chain is not
	// safe to change while the plugin reads through it.
	c := layoutCluster(t, "dgx-h100", func(cfg *plugin.Config) {
		cfg.Client.(*fake.Clientset).PrependReactor("list", "resourceclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("resourceclaims is forbidden")
		})
	})
	before := c.n.layout()
	c.label(api.LabelMIGConfig, "all-1g.10gb")
	c.waitForState(api.MIGConfigFailed)
	c.waitForEvent(plugin.ReasonMIGLayoutFailed, `MIG layout "all-1g.10gb" is not applied: reading the ResourceClaims allocated on the node's devices: resourceclaims is forbidden`)
	if got := c.n.layout(); !reflect.DeepEqual(got, before) {
		t.Errorf("MIG instances %v, want them untouched %v", got, before)
	}
}

func TestHalfAppliedMIGLayoutIsRolledBack(t *testing.T) {
	n := newNode(t, "dgx-h100", func(c *plugin.Config) { c.Render.MIG = driver.MIGStatic })
	// GPU 3 refuses every GPU instance.
	dev := n.backend.NVML.(*server.Server).Devices[3].(*server.Device)
	dev.CreateGpuInstanceWithPlacementFunc = func(*nvml.GpuInstanceProfileInfo, *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
		return nil, nvml.ERROR_UNKNOWN
	}
	file := filepath.Join(t.TempDir(), "mig-layouts.yaml")
	if err := os.WriteFile(file, []byte(testMIGLayouts), 0o644); err != nil {
		t.Fatal(err)
	}
	c := startOnCluster(t, n, func(cfg *plugin.Config) {
		cfg.MIGLayoutsFile = file
		cfg.MIGLayoutInterval = 10 * time.Millisecond
	})
	c.label(api.LabelMIGConfig, "all-1g.10gb")
	c.waitForState(api.MIGConfigFailed)
	c.waitForEvent(plugin.ReasonMIGLayoutFailed, `MIG layout "all-1g.10gb" failed on GPU 3`, "CreateGpuInstanceWithPlacement: ERROR_UNKNOWN",
		"restored to their previous layout: GPU 0, GPU 1, GPU 2, GPU 3", "no other GPU was changed")

	// With the label gone nothing applies the layout again: every GPU is as it was. Until
	// the plugin sees the label go it may try the layout once more (and roll it back), so
	// every GPU must be as it was for a while, not at one instant.
	c.label(api.LabelMIGConfig, "")
	const settled = 500 * time.Millisecond
	var since time.Time
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		switch {
		case len(c.n.gpuProfiles()) != 0 || anyMIGEnabled(c):
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		}
		if !since.IsZero() && time.Since(since) >= settled {
			break
		}
	}
	if got := c.n.gpuProfiles(); since.IsZero() || time.Since(since) < settled || len(got) != 0 || anyMIGEnabled(c) {
		t.Errorf("GPUs left half-applied: instances %v, MIG mode on: %v", got, anyMIGEnabled(c))
	}
	c.publishedMIG(nil)
}

func anyMIGEnabled(c *cluster) bool {
	for _, g := range c.n.inventory().GPUs {
		if g.MIG != nil && g.MIG.Enabled {
			return true
		}
	}
	return false
}

package kubeletplugin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/driver/discover"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

// testMIGLayouts are layouts in mig-parted's format, with per-model variants for the
// H100 80GB (0x233010DE) and the A100 40GB (0x20B010DE).
const testMIGLayouts = `
version: v1
mig-configs:
  all-disabled:
  - devices: all
    mig-enabled: false
  all-1g.10gb:
  - device-filter: ["0x233010DE", "0x20B210DE"]
    devices: all
    mig-enabled: true
    mig-devices: {"1g.10gb": 7}
  - device-filter: "0x20B010DE"
    devices: all
    mig-enabled: true
    mig-devices: {"1g.10gb": 4}
  all-balanced:
  - device-filter: ["0x233010DE"]
    devices: all
    mig-enabled: true
    mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
  - device-filter: ["NVIDIA A100-SXM4-40GB", "Mock NVIDIA A100-SXM4-40GB"]
    devices: all
    mig-enabled: true
    mig-devices: {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
  too-many:
  - devices: [0]
    mig-enabled: true
    mig-devices: {"1g.10gb": 2}
  - devices: [3]
    mig-enabled: true
    mig-devices: {"3g.40gb": 2, "2g.20gb": 1}
  missing-gpus:
  - devices: [8, 99]
    mig-enabled: true
    mig-devices: {"1g.10gb": 7}
  other-model:
  - device-filter: "0x20B010DE"
    devices: all
    mig-enabled: true
    mig-devices: {"1g.5gb": 7}
  two-media-engines:
  - devices: all
    mig-enabled: true
    mig-devices: {"1g.10gb+me": 2}
  unknown-profile:
  - devices: all
    mig-enabled: true
    mig-devices: {"1g.5gb": 7}
`

// layoutCluster is a static-MIG node whose plugin runs on a fake API server and follows
// the Node's MIG layout label, from testMIGLayouts.
func layoutCluster(t *testing.T, profile string, mutate ...func(*plugin.Config)) *cluster {
	t.Helper()
	file := filepath.Join(t.TempDir(), "mig-layouts.yaml")
	if err := os.WriteFile(file, []byte(testMIGLayouts), 0o644); err != nil {
		t.Fatal(err)
	}
	n := newNode(t, profile, func(c *plugin.Config) { c.Render.MIG = driver.MIGStatic })
	return startOnCluster(t, n, append([]func(*plugin.Config){func(c *plugin.Config) {
		c.MIGLayoutsFile = file
		c.MIGLayoutInterval = 10 * time.Millisecond
	}}, mutate...)...)
}

// label sets (or, with "", removes) labels of the Node.
func (c *cluster) label(kv ...string) {
	c.t.Helper()
	labels := map[string]any{}
	for k := 0; k < len(kv); k += 2 {
		labels[kv[k]] = kv[k+1]
		if kv[k+1] == "" {
			labels[kv[k]] = nil
		}
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if _, err := c.client.CoreV1().Nodes().Patch(context.Background(), nodeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) nodeLabels() map[string]string {
	c.t.Helper()
	node, err := c.client.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	return node.Labels
}

// waitForState waits for the Node's MIG layout state label to be state.
func (c *cluster) waitForState(state string) {
	c.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if c.nodeLabels()[api.LabelMIGConfigState] == state {
			return
		}
	}
	c.t.Fatalf("the Node's %s label is %q, want %q", api.LabelMIGConfigState, c.nodeLabels()[api.LabelMIGConfigState], state)
}

// layoutEvents are the reasons of the MIG layout Events on the Node.
func (c *cluster) layoutEvents() []string {
	c.t.Helper()
	list, err := c.client.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if strings.HasPrefix(e.Reason, "MIGLayout") {
			out = append(out, e.Reason)
		}
	}
	slices.Sort(out)
	return out
}

// gpuProfiles are the MIG profiles of the GPU instances on each simulated GPU, sorted,
// with their compute instances using all of them.
func (n *node) gpuProfiles() map[int][]string {
	n.t.Helper()
	out := map[int][]string{}
	inv := n.inventory()
	for _, g := range inv.GPUs {
		if g.MIG == nil {
			continue
		}
		for _, in := range g.MIG.Instances {
			out[g.Index] = append(out[g.Index], in.Profile)
		}
		slices.Sort(out[g.Index])
	}
	return out
}

// inventory is a fresh discovery of the simulated GPUs.
func (n *node) inventory() *driver.Inventory {
	n.t.Helper()
	inv, err := discover.Discover(n.backend)
	if err != nil {
		n.t.Fatal(err)
	}
	return inv
}

func repeat(profile string, n int) []string {
	out := make([]string, n)
	for k := range out {
		out[k] = profile
	}
	return out
}

// publishedMIG waits until the API server's slices hold exactly the MIG devices want and
// no whole GPU of the GPUs in MIG mode.
func (c *cluster) publishedMIG(want []string) {
	c.t.Helper()
	var got []string
	c.waitForSlices(func(devs map[string]resourceapi.Device) bool {
		got = got[:0]
		for name, d := range devs {
			if driver.DeviceType(d) == api.TypeMIG {
				got = append(got, name)
			}
		}
		slices.Sort(got)
		return slices.Equal(got, want)
	})
}

func TestMIGLayoutLabelPartitionsEveryFreeGPU(t *testing.T) {
	for _, tc := range []struct {
		profile string
		per     int
	}{{"dgx-h100", 7}, {"dgx-a100", 4}} {
		t.Run(tc.profile, func(t *testing.T) {
			c := layoutCluster(t, tc.profile)
			c.label(api.LabelMIGConfig, "all-1g.10gb")
			c.waitForState(api.MIGConfigSuccess)
			got := c.n.gpuProfiles()
			if len(got) != 8 {
				t.Fatalf("MIG instances on %d GPUs, want 8: %v", len(got), got)
			}
			for gpu, profiles := range got {
				if want := repeat("1g.10gb", tc.per); !reflect.DeepEqual(profiles, want) {
					t.Errorf("GPU %d: %v, want %v", gpu, profiles, want)
				}
			}
			var want []string
			for gpu := range 8 {
				for _, in := range c.n.inventory().GPU(gpu).MIG.Instances {
					want = append(want, fmt.Sprintf("gpu-%d-mig-1g10gb-%d", gpu, in.Placement.Start))
				}
			}
			slices.Sort(want)
			if got := migNames(c.d.Pool()); !reflect.DeepEqual(got, want) {
				t.Errorf("published MIG devices %v, want %v", got, want)
			}
			c.publishedMIG(want)
			for _, d := range c.d.Pool().Slices {
				for _, dev := range d.Devices {
					if typ := driver.DeviceType(dev); typ == api.TypeGPU || typ == api.TypeShare {
						t.Errorf("%s published for a GPU in MIG mode", dev.Name)
					}
				}
			}
			c.waitForEvent(plugin.ReasonMIGLayoutApplied, `MIG layout "all-1g.10gb" applied`, fmt.Sprintf("GPU 7 %d×1g.10gb", tc.per))

			// Back to no MIG: whole GPUs again.
			c.label(api.LabelMIGConfig, "all-disabled")
			c.waitForState(api.MIGConfigSuccess)
			c.waitForEvent(plugin.ReasonMIGLayoutApplied, `MIG layout "all-disabled" applied`, "GPU 0 MIG disabled")
			if got := c.n.gpuProfiles(); len(got) != 0 {
				t.Errorf("MIG instances left: %v", got)
			}
			c.publishedMIG(nil)
		})
	}
}

func TestMIGLayoutWaitsForTheClaimsOfAGPU(t *testing.T) {
	c := layoutCluster(t, "dgx-h100")
	c.label(api.LabelMIGConfig, "all-1g.10gb")
	c.waitForState(api.MIGConfigSuccess)

	// A claim holds a 1g.10gb instance of GPU 0.
	classes, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	c.n.pool = c.d.Pool()
	c.n.alloc = allocation.New(classes, c.n.pool.ResourceSlices(nodeName, 2))
	claim := c.n.allocate(migClaim + `      - cel:
          expression: device.attributes["gpu.gpudra.dev"].parentIndex == 0
`)
	mustPrepare(t, c.d, claim)
	held := c.n.allocatedPlacement(claim)
	if held.gpu != 0 {
		t.Fatalf("the claim got GPU %d, want 0", held.gpu)
	}

	c.label(api.LabelMIGConfig, "all-balanced")
	c.waitForState(api.MIGConfigPending)
	c.waitForEvent(plugin.ReasonMIGLayoutPending, `MIG layout "all-balanced" waits`, "GPU 0 (claims default/"+claim.Name+")")
	balanced := []string{"1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"}
	got := c.n.gpuProfiles()
	if want := repeat("1g.10gb", 7); !reflect.DeepEqual(got[0], want) {
		t.Errorf("GPU 0 while its claim is prepared: %v, want it unchanged %v", got[0], want)
	}
	for gpu := 1; gpu < 8; gpu++ {
		if !reflect.DeepEqual(got[gpu], balanced) {
			t.Errorf("GPU %d: %v, want %v", gpu, got[gpu], balanced)
		}
	}
	if n := c.n.spec(claim); n == nil {
		t.Error("the prepared claim lost its CDI spec")
	}

	if err := unprepare(t, c.d, claim); err != nil {
		t.Fatal(err)
	}
	c.waitForState(api.MIGConfigSuccess)
	c.waitForEvent(plugin.ReasonMIGLayoutApplied, `MIG layout "all-balanced" applied`, "GPU 0 2×1g.10gb 1×2g.20gb 1×3g.40gb")
	for gpu, profiles := range c.n.gpuProfiles() {
		if !reflect.DeepEqual(profiles, balanced) {
			t.Errorf("GPU %d after the claim went: %v, want %v", gpu, profiles, balanced)
		}
	}
	if events := c.layoutEvents(); !slices.Contains(events, plugin.ReasonMIGLayoutPending) || !slices.Contains(events, plugin.ReasonMIGLayoutApplied) {
		t.Errorf("MIG layout Events %v", events)
	}
}

func TestImpossibleMIGLayoutIsRefusedAndChangesNothing(t *testing.T) {
	for _, tc := range []struct{ layout, reason string }{
		{"too-many", "GPU 3 (NVIDIA H100 80GB HBM3) cannot hold 3g.40gb 3g.40gb 2g.20gb: they need 8 compute slices, the GPU has 7"},
		{"missing-gpus", "mig-configs.missing-gpus[0].devices[0]: there is no GPU 8 on this node; its GPU indices are 0, 1, 2, 3, 4, 5, 6, 7"},
		{"other-model", `MIG layout "other-model" selects none of the node's GPUs and nothing was changed: no entry's devices and device-filter match its GPUs, NVIDIA H100 80GB HBM3 (0x233010DE)`},
		{"two-media-engines", "GPU 0 (NVIDIA H100 80GB HBM3) holds at most 1 instance(s) of MIG profile 1g.10gb+me, the layout asks for 2"},
		{"unknown-profile", "does not offer MIG profile 1g.5gb (it offers 1g.10gb"},
		{"no-such-layout", `no MIG layout "no-such-layout"; the layouts are all-1g.10gb, all-balanced`},
	} {
		t.Run(tc.layout, func(t *testing.T) {
			t.Parallel() // each on a node and a cluster of its own
			c := layoutCluster(t, "dgx-h100")
			before, pool := c.n.layout(), migNames(c.d.Pool())
			c.label(api.LabelMIGConfig, tc.layout)
			c.waitForState(api.MIGConfigFailed)
			msg := c.waitForEvent(plugin.ReasonMIGLayoutFailed, tc.reason)
			if tc.layout != "no-such-layout" && !strings.Contains(msg, "nothing was changed") {
				t.Errorf("Event %q does not say nothing was changed", msg)
			}
			if got := c.n.layout(); !reflect.DeepEqual(got, before) {
				t.Errorf("MIG instances %v, want them untouched %v", got, before)
			}
			if got := migNames(c.d.Pool()); !reflect.DeepEqual(got, pool) {
				t.Errorf("published MIG devices %v, want %v", got, pool)
			}
		})
	}
}

func TestMIGLayoutLeftToNVIDIAMigManager(t *testing.T) {
	c := layoutCluster(t, "dgx-h100")
	before := c.n.layout()
	c.label(api.LabelNVIDIAMIGConfig, "all-balanced", api.LabelMIGConfig, "all-1g.10gb")
	time.Sleep(300 * time.Millisecond) // many rounds of the plugin's layout loop
	if got := c.n.layout(); !reflect.DeepEqual(got, before) {
		t.Errorf("MIG instances %v, want them untouched %v", got, before)
	}
	if state, ok := c.nodeLabels()[api.LabelMIGConfigState]; ok {
		t.Errorf("state label %q set on a node whose layout mig-manager owns", state)
	}
	if events := c.layoutEvents(); len(events) != 0 {
		t.Errorf("MIG layout Events %v on a node whose layout mig-manager owns", events)
	}

	// Without mig-manager's label the layout applies.
	c.label(api.LabelNVIDIAMIGConfig, "")
	c.waitForState(api.MIGConfigSuccess)
}

func TestMIGLayoutRefusedWithDynamicMIG(t *testing.T) {
	c := layoutCluster(t, "dgx-h100", func(cfg *plugin.Config) { cfg.Render.MIG = driver.MIGDynamic })
	before := c.n.layout()
	c.label(api.LabelMIGConfig, "all-1g.10gb")
	c.waitForState(api.MIGConfigFailed)
	c.waitForEvent(plugin.ReasonMIGLayoutFailed, "with --mig=dynamic the plugin creates a MIG instance for each claim")
	if got := c.n.layout(); !reflect.DeepEqual(got, before) {
		t.Errorf("MIG instances %v, want them untouched %v", got, before)
	}
}

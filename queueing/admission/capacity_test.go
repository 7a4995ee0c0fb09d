package admission

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
)

// scrape gathers the capacity metrics as name{label="value",...} → value.
func scrape(t *testing.T, c client.Reader) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(&Capacity{Client: c})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			out[f.GetName()+"{"+strings.Join(labels, ",")+"}"] = m.GetGauge().GetValue()
		}
	}
	return out
}

// allocate has the real allocator place one claim on the node and stores it allocated.
func allocate(t *testing.T, c client.Client, node, name, specYAML string) *resourceapi.ResourceClaim {
	t.Helper()
	ctx := context.Background()
	st, _, err := liveState(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := allocation.ParseClaimSpec([]byte(specYAML))
	if err != nil {
		t.Fatal(err)
	}
	claim := &resourceapi.ResourceClaim{Spec: spec}
	claim.Namespace, claim.Name, claim.UID = "team-a", name, types.UID("uid-"+name)
	res, err := st.Allocate(ctx, node, claim)
	if err != nil {
		t.Fatal(err)
	}
	claim.Status.Allocation = &res[0]
	if err := c.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	return claim
}

func claimFor(class, selector string) string {
	y := "devices:\n  requests:\n  - name: r\n    exactly:\n      deviceClassName: " + class + "\n"
	if selector != "" {
		y += "      selectors:\n      - cel:\n          expression: '" + selector + "'\n"
	}
	return y
}

func TestCapacityMetricsFollowAllocations(t *testing.T) {
	node := func(metric, n string) string { return fmt.Sprintf("%s{node=%q}", metric, n) }
	group := func(n, g string) string { return fmt.Sprintf("gpudra_nvlink_group_free{group=%q,node=%q}", g, n) }
	for _, tc := range []struct {
		name  string
		claim string
		want  map[string]float64 // on r1-n1, where the claim is allocated
	}{
		{name: "a whole GPU takes one GPU and every group holding it",
			claim: claimFor("gpu.gpudra.dev", ""),
			want: map[string]float64{node("gpudra_node_gpus_free", "r1-n1"): 3,
				group("r1-n1", "nvlink-0-1"): 0, group("r1-n1", "nvlink-0-1-2-3"): 0, group("r1-n1", "nvlink-1-2"): 1}},
		{name: "a share of a GPU takes the whole GPU from whole and group use",
			claim: claimFor("gpu-share.gpudra.dev", ""),
			want: map[string]float64{node("gpudra_node_gpus_free", "r1-n1"): 3,
				group("r1-n1", "nvlink-0-2"): 0, group("r1-n1", "nvlink-2-3"): 1}},
		{name: "an NVLink pair takes both its GPUs and the groups sharing one",
			claim: claimFor("nvlink-group.gpudra.dev", `device.attributes["gpu.gpudra.dev"].gpuCount == 2`),
			want: map[string]float64{node("gpudra_node_gpus_free", "r1-n1"): 2,
				group("r1-n1", "nvlink-0-1"): 0, group("r1-n1", "nvlink-1-3"): 0, group("r1-n1", "nvlink-2-3"): 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := lab(t)
			before := scrape(t, c)
			for _, n := range []string{"r1-n1", "r2-n4"} {
				if before[node("gpudra_node_gpus", n)] != 4 || before[node("gpudra_node_gpus_free", n)] != 4 || before[group(n, "nvlink-0-1-2-3")] != 1 {
					t.Fatalf("idle cluster: %s has gpus %v, free %v, quad free %v; want 4, 4, 1", n,
						before[node("gpudra_node_gpus", n)], before[node("gpudra_node_gpus_free", n)], before[group(n, "nvlink-0-1-2-3")])
				}
			}
			claim := allocate(t, c, "r1-n1", "work", tc.claim)
			during := scrape(t, c)
			for k, v := range tc.want {
				if got, ok := during[k]; !ok || got != v {
					t.Errorf("allocated %v: %s = %v (present %v), want %v", allocation.SortedDevices(*claim.Status.Allocation), k, got, ok, v)
				}
			}
			if during[node("gpudra_node_gpus", "r1-n1")] != 4 || during[node("gpudra_node_gpus_free", "r2-n4")] != 4 {
				t.Errorf("the claim changed what it should not: gpus on r1-n1 %v, free on r2-n4 %v", during[node("gpudra_node_gpus", "r1-n1")], during[node("gpudra_node_gpus_free", "r2-n4")])
			}
			if err := c.Delete(context.Background(), claim); err != nil {
				t.Fatal(err)
			}
			after := scrape(t, c)
			for k, v := range before {
				if after[k] != v {
					t.Errorf("after release: %s = %v, want %v as before", k, after[k], v)
				}
			}
		})
	}
}

func TestCapacityMetricsSkipTaintedDevicesAndOldSlices(t *testing.T) {
	ctx := context.Background()
	c := lab(t)
	var slices resourceapi.ResourceSliceList
	if err := c.List(ctx, &slices); err != nil {
		t.Fatal(err)
	}
	for _, sl := range slices.Items {
		switch *sl.Spec.NodeName {
		case "r1-n1": // an unhealthy GPU, tainted by the plugin
			for k, d := range sl.Spec.Devices {
				if d.Name == driver.GPUDeviceName(3) || d.Name == driver.GroupDeviceName([]int{2, 3}) {
					sl.Spec.Devices[k].Taints = []resourceapi.DeviceTaint{{Key: "gpu.gpudra.dev/unhealthy", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
				}
			}
			if err := c.Update(ctx, &sl); err != nil {
				t.Fatal(err)
			}
		case "r1-n2": // a republish under way: the slices of generation 1 are replaced by generation 2
			old := sl.DeepCopy()
			old.Name, old.ResourceVersion = sl.Name+"-old", ""
			if err := c.Create(ctx, old); err != nil {
				t.Fatal(err)
			}
			sl.Spec.Pool.Generation = 2
			if err := c.Update(ctx, &sl); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := scrape(t, c)
	for k, v := range map[string]float64{
		`gpudra_node_gpus{node="r1-n1"}`:                            4,
		`gpudra_node_gpus_free{node="r1-n1"}`:                       3,
		`gpudra_nvlink_group_free{group="nvlink-2-3",node="r1-n1"}`: 0,
		`gpudra_nvlink_group_free{group="nvlink-0-1",node="r1-n1"}`: 1,
		`gpudra_node_gpus{node="r1-n2"}`:                            4,
		`gpudra_node_gpus_free{node="r1-n2"}`:                       4,
		`gpudra_nvlink_group_free{group="nvlink-0-1",node="r1-n2"}`: 1,
	} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if problems, err := testutil.CollectAndLint(&Capacity{Client: c}); err != nil || len(problems) > 0 {
		t.Errorf("metric lint: %v %v", problems, err)
	}
}

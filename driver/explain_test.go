package driver_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gpudra/gpudra/driver/allocation"
)

func TestExplain(t *testing.T) {
	ctx := context.Background()
	_, v100 := simNode(t, "dgx-v100", "v100")
	_, l40s := simNode(t, "l40s-pcie", "l40s")
	st := newState(t, v100, l40s)
	holders := allocation.Holders{}
	hold := func(node, name, spec string) {
		c := claim(t, spec)
		res, err := st.AllocateAndCommit(ctx, node, c)
		if err != nil {
			t.Fatal(err)
		}
		holders.AddHolder("default/"+name, &res[0])
	}
	hold("v100", "one", gpuByIndex(1))
	hold("v100", "five", gpuByIndex(5))
	hold("l40s", "all", strings.Replace(wholeGPU, "deviceClassName: gpu.gpudra.dev", "deviceClassName: gpu.gpudra.dev\n      count: 8", 1))

	diag := func(spec string) map[string]allocation.NodeDiagnosis {
		t.Helper()
		out, err := st.Explain(ctx, claim(t, spec), holders)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]allocation.NodeDiagnosis{}
		for _, d := range out {
			m[d.Node] = d
		}
		return m
	}
	t.Run("a quad blocked by busy GPUs names the constraint", func(t *testing.T) {
		d := diag(fourCliqueGPUs)["v100"]
		if d.Fits || !strings.Contains(d.Reason, "matchAttribute gpu.gpudra.dev/nvlinkClique") {
			t.Errorf("v100: %+v", d)
		}
		if r := d.Requests[0]; r.Matching != 8 || r.Free != 6 {
			t.Errorf("request: %+v, want 8 matching, 6 free", r)
		}
	})
	t.Run("a full node names what holds its devices", func(t *testing.T) {
		d := diag(wholeGPU)["l40s"]
		if d.Fits || !strings.Contains(d.Reason, "only 0 are free") || !strings.Contains(d.Reason, "default/all") {
			t.Errorf("l40s: %+v", d)
		}
	})
	t.Run("a selector no device matches says so", func(t *testing.T) {
		d := diag(strings.Replace(gpuByIndex(0), "index == 0", "index == 42", 1))["v100"]
		if d.Fits || !strings.Contains(d.Reason, "0 devices here match") {
			t.Errorf("%+v", d)
		}
	})
	t.Run("fitting nodes come first", func(t *testing.T) {
		out, err := st.Explain(ctx, claim(t, wholeGPU), holders)
		if err != nil {
			t.Fatal(err)
		}
		if !out[0].Fits || out[0].Node != "v100" || out[1].Fits {
			t.Errorf("order: %+v", out)
		}
	})
}

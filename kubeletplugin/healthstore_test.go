package kubeletplugin_test

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gpudra/gpudra/driver/nvmlsim"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
	"github.com/gpudra/gpudra/kubeletplugin/health"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

func TestHealthFileIsVersionedJSON(t *testing.T) {
	n := newNode(t, "dgx-h100")
	c := startOnCluster(t, n)
	inject(t, n, 2, nvmlsim.XID(79))
	c.waitForSlices(allTainted(2, 1))
	raw, err := os.ReadFile(filepath.Join(n.cfg.CheckpointDir, health.File))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Version string                       `json:"version"`
		GPUs    []map[string]json.RawMessage `json:"gpus"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatalf("%s: %v\n%s", health.File, err, raw)
	}
	if f.Version != health.Version || len(f.GPUs) != 1 {
		t.Fatalf("%s: version %q with %d GPUs, want %q with GPU 2:\n%s", health.File, f.Version, len(f.GPUs), health.Version, raw)
	}
	g := f.GPUs[0]
	var got struct {
		Index  int    `json:"index"`
		UUID   string `json:"uuid"`
		BootID string `json:"bootID"`
		Taint  map[string]string
	}
	for field, v := range map[string]any{"index": &got.Index, "uuid": &got.UUID, "bootID": &got.BootID, "taint": &got.Taint} {
		if err := json.Unmarshal(g[field], v); err != nil {
			t.Errorf("gpus[0].%s: %v\n%s", field, err, raw)
		}
	}
	if len(g) != 4 || got.Index != 2 || got.UUID != n.backendGPU(2) || got.BootID != "boot-1" {
		t.Errorf("gpus[0] = %s, want exactly index 2, uuid %s, bootID boot-1 and taint", raw, n.backendGPU(2))
	}
	if keys := slices.Sorted(maps.Keys(got.Taint)); !slices.Equal(keys, []string{"added", "effect", "key", "value"}) || got.Taint["key"] != api.TaintUnhealthy || got.Taint["value"] != "xid-79" || got.Taint["effect"] != "NoExecute" {
		t.Errorf("gpus[0].taint = %v, want key %s, value xid-79, effect NoExecute and added", got.Taint, api.TaintUnhealthy)
	}
}

func TestCorruptHealthFileIsSetAside(t *testing.T) {
	for name, content := range map[string]string{
		"not JSON":         "{gpus: [",
		"another version":  `{"version":"gpu.gpudra.dev/health/v9","gpus":[]}`,
		"an unknown field": `{"version":"` + health.Version + `","gpus":[{"index":2,"bootID":"boot-1","taint":{"key":"k","value":"v","effect":"NoExecute","added":"2025-01-01T00:00:00Z"},"extra":1}]}`,
		"a bad effect":     `{"version":"` + health.Version + `","gpus":[{"index":2,"bootID":"boot-1","taint":{"key":"k","value":"v","effect":"Sometimes","added":"2025-01-01T00:00:00Z"}}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			n := newNode(t, "dgx-h100")
			if err := os.MkdirAll(n.cfg.CheckpointDir, 0o750); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(n.cfg.CheckpointDir, health.File)
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			d, err := plugin.New(context.Background(), n.cfg)
			if err != nil {
				t.Fatalf("a corrupt GPU health file stopped the plugin: %v", err)
			}
			for _, s := range d.Pool().Slices {
				for _, dev := range s.Devices {
					if len(dev.Taints) > 0 {
						t.Errorf("%s tainted from a corrupt health file: %+v", dev.Name, dev.Taints)
					}
				}
			}
			aside, _ := filepath.Glob(path + ".corrupt-*")
			if len(aside) != 1 {
				t.Fatalf("set aside: %v, want one %s.corrupt-<time>", aside, health.File)
			}
			if kept, _ := os.ReadFile(aside[0]); string(kept) != content {
				t.Errorf("the set-aside file holds %q, want the corrupt content", kept)
			}
		})
	}
}

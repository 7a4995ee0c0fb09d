package kubeletplugin_test

import (
	"os"
	"path/filepath"
	"testing"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/cdi"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

// hamiFiles are the HAMi-core cache directories and preload files in the plugin's state
// directory.
func hamiFiles(t testing.TB, n *node) []string {
	t.Helper()
	var out []string
	for _, dir := range []string{"vgpu", "vgpu-preload"} {
		entries, err := os.ReadDir(filepath.Join(n.cfg.CheckpointDir, dir))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, e := range entries {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

func hamiNode(t *testing.T) *node {
	return newNode(t, "dgx-h100", func(c *plugin.Config) { c.VGPULibrary = "/opt/hami/libvgpu.so" })
}

// preloadMount is the host file the device's edits mount at /etc/ld.so.preload.
func preloadMount(t *testing.T, e cdispec.ContainerEdits) string {
	t.Helper()
	for _, m := range e.Mounts {
		if m.ContainerPath == cdi.VGPUPreloadPath {
			return m.HostPath
		}
	}
	t.Fatalf("no mount at %s: %+v", cdi.VGPUPreloadPath, e.Mounts)
	return ""
}

func checkPreloadFile(t *testing.T, path string) {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatalf("the preload file: %v", err)
	}
	if got := info.Mode().Perm(); got != 0o644 {
		t.Errorf("preload file mode %v, want 0644 (the loader reads it as the process's user)", got)
	}
	if got, _ := os.ReadFile(path); string(got) != cdi.VGPUPreload {
		t.Errorf("preload file holds %q, want %q", got, cdi.VGPUPreload)
	}
}

// A HAMi-core share's containers load libvgpu.so from a per-claim preload file, not from
// their environment; the file goes with the claim.
func TestHAMiPreloadFileLivesAsLongAsItsClaim(t *testing.T) {
	n := hamiNode(t)
	d := n.newDriver(nil)
	c := n.allocate(shareClaim("4Gi", "20", ""))
	mustPrepare(t, d, c)
	e := n.spec(c).Devices[0].ContainerEdits
	if v, ok := env(e)["LD_PRELOAD"]; ok {
		t.Errorf("the share's environment has LD_PRELOAD=%q", v)
	}
	path := preloadMount(t, e)
	checkPreloadFile(t, path)
	if err := unprepare(t, d, c); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the preload file outlives its claim: %v", err)
	}
	if got := hamiFiles(t, n); len(got) != 0 {
		t.Errorf("HAMi-core files left after unprepare: %v", got)
	}
}

// At start-up the plugin writes a prepared claim's preload file again when it is missing
// or cut short, and removes those of claims it does not know.
func TestStartupRepairsAndSweepsHAMiFiles(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"a missing preload file is written again", func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}},
		{"a preload file cut short is written again", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("/usr/lo"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := hamiNode(t)
			c := n.allocate(shareClaim("4Gi", "20", ""))
			mustPrepare(t, n.newDriver(nil), c)
			path := preloadMount(t, n.spec(c).Devices[0].ContainerEdits)
			tc.damage(t, path)
			orphans := []string{
				filepath.Join(n.cfg.CheckpointDir, "vgpu-preload", "0a0a0a0a-dead-4bee-8000-000000000001"),
				filepath.Join(n.cfg.CheckpointDir, "vgpu-preload", "0a0a0a0a-dead-4bee-8000-000000000002.tmp"),
				filepath.Join(n.cfg.CheckpointDir, "vgpu", "0a0a0a0a-dead-4bee-8000-000000000001"),
			}
			for _, o := range orphans {
				if err := os.MkdirAll(filepath.Dir(o), 0o750); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(o, []byte(cdi.VGPUPreload), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			d := n.newDriver(nil)
			checkPreloadFile(t, path)
			for _, o := range orphans {
				if _, err := os.Stat(o); !os.IsNotExist(err) {
					t.Errorf("%s, of no prepared claim, survives the start-up: %v", o, err)
				}
			}
			if err := unprepare(t, d, c); err != nil {
				t.Fatal(err)
			}
			if got := hamiFiles(t, n); len(got) != 0 {
				t.Errorf("HAMi-core files left after unprepare: %v", got)
			}
		})
	}
}

package kubeletplugin_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func spares(t *testing.T, n *node) []string {
	t.Helper()
	out, err := filepath.Glob(filepath.Join(n.cfg.CheckpointDir, "mps", ".spare-*"))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A claim under MPS gets a spare directory tree renamed into place; its unprepare
// removes the claim's tree and makes a new spare. A restarted plugin replaces the spares
// it finds (a killed plugin may have left one half made).
func TestMPSClaimTakesASpareDirectoryTree(t *testing.T) {
	n := newNode(t, "dgx-h100")
	d := n.newDriver(nil)
	before := spares(t, n)
	if len(before) != 4 {
		t.Fatalf("spares after start-up %v, want 4", before)
	}
	// A spare has a claim's modes already (mps_test.go, assertMPSDirs).
	for _, sp := range before {
		for dir, want := range map[string]os.FileMode{sp: 0o711, filepath.Dir(sp): 0o711, filepath.Join(sp, "pipe"): 0o755,
			filepath.Join(sp, "log"): 0o755, filepath.Join(sp, "shm"): os.ModeSticky | 0o777} {
			if got := mode(t, dir); got != want {
				t.Errorf("spare directory %s has mode %v, want %v", dir, got, want)
			}
		}
	}
	c := n.allocate(shareClaim("4Gi", "20", ""))
	mustPrepare(t, d, c)
	after := spares(t, n)
	if len(after) != 3 {
		t.Fatalf("spares after an MPS prepare %v, want 3", after)
	}
	claimDir := filepath.Join(n.cfg.CheckpointDir, "mps", string(c.UID))
	// Exactly one of the spares made at start-up is gone (which one is the plugin's
	// business; glob order is not creation order), and no new one appeared.
	for _, s := range after {
		if !slices.Contains(before, s) {
			t.Fatalf("spare %s appeared during a prepare (before %v)", s, before)
		}
	}
	for _, sub := range []string{"pipe", "log", "shm"} {
		if fi, err := os.Stat(filepath.Join(claimDir, sub)); err != nil || !fi.IsDir() {
			t.Errorf("claim's %s directory: %v", sub, err)
		}
	}
	assertMPSDirs(t, filepath.Join(claimDir, "pipe"), filepath.Join(claimDir, "log"), filepath.Join(claimDir, "shm"))
	if err := unprepare(t, d, c); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(claimDir); !os.IsNotExist(err) {
		t.Errorf("claim's MPS directory after unprepare: %v", err)
	}
	if got := spares(t, n); len(got) != 4 {
		t.Errorf("spares after unprepare %v, want 4", got)
	}

	planted := filepath.Join(spares(t, n)[0], "pipe", "left-over")
	if err := os.WriteFile(planted, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	n.newDriver(nil)
	if _, err := os.Stat(planted); !os.IsNotExist(err) {
		t.Errorf("a spare of the earlier plugin survived its restart: %v", err)
	}
	if got := spares(t, n); len(got) != 4 {
		t.Errorf("spares after restart %v, want 4", got)
	}
}

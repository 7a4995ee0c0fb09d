package lab

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// A plugin stopped with an MPS claim prepared leaves the claim's shm tmpfs mounted in its
// state directory; removing the lab detaches it instead of failing (or leaking it).
func TestRemoveStateUnmountsWhatPluginsLeft(t *testing.T) {
	if os.Geteuid() != 0 {
		lacking(t, "mounting a tmpfs needs root (uid %d): run the tests as root, as make test does", os.Geteuid())
	}
	dir := t.TempDir()
	shm := filepath.Join(dir, "nodes", "n1", "plugin", "mps", "claim", "shm")
	if err := os.MkdirAll(shm, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("gpudra-test-shm", shm, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(shm, unix.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(shm, "segment"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := removeState(dir, false); err != nil {
		t.Fatalf("removeState: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("lab directory still there: %v", err)
	}
	if mps, err := mountsUnder(dir); err != nil || len(mps) > 0 {
		t.Errorf("mounts left under the lab: %v (%v)", mps, err)
	}
}

// Package mpstest helps tests of MPS control daemons: a stand-in for
// nvidia-cuda-mps-control, the TestMain that lets a test binary act as the plugin's
// "mps-exec", and the mounts a test leaves behind.
package mpstest

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/gpudra/gpudra/kubeletplugin/mps"
)

// FakeControl stands in for nvidia-cuda-mps-control: "-d" forks a daemon that writes
// its environment, what its /dev/shm holds and its pid file into the pipe directory;
// without arguments it passes the commands on stdin to the daemon (recorded in
// <pipe>/commands; quit stops it), and writes what its /dev/shm holds to <pipe>/client.shm.
const FakeControl = `#!/bin/sh
pipe=${CUDA_MPS_PIPE_DIRECTORY:?}
case "$1" in
-d)
  "$0" serve </dev/null >/dev/null 2>&1 &
  exit 0 ;;
serve)
  env > "$pipe/daemon.env"
  command -v nvidia-cuda-mps-server > "$pipe/daemon.server"
  ls -A /dev/shm > "$pipe/daemon.shm"
  trap 'rm -f "$pipe/nvidia-cuda-mps-control.pid"; exit 0' TERM
  echo $$ > "$pipe/nvidia-cuda-mps-control.pid"
  while :; do sleep 0.05; done ;;
esac
pid=$(cat "$pipe/nvidia-cuda-mps-control.pid" 2>/dev/null) && kill -0 "$pid" 2>/dev/null || { echo "Cannot find MPS control daemon process" >&2; exit 1; }
ls -A /dev/shm > "$pipe/client.shm"
while read -r cmd; do
  echo "$cmd" >> "$pipe/commands"
  [ "$cmd" = quit ] && kill "$pid"
done
exit 0
`

// Main runs a test binary as mps.Process runs the plugin's program (its Self) for a
// daemon with a shm directory, "<program> mps-exec <shm dir> <binary> [args...]", and
// otherwise runs its tests. A TestMain of a package whose tests start daemons with
// mps.Process calls it.
func Main(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == mps.ExecCommand {
		err := mps.Exec(os.Args[2:])
		fmt.Fprintln(os.Stderr, mps.ExecCommand+":", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// WriteControl writes body as an executable nvidia-cuda-mps-control under a temporary
// driver root and returns its path.
func WriteControl(t testing.TB, body string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "usr", "bin", "nvidia-cuda-mps-control")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// MountsUnder are the mount points of this process's mount namespace at or below dir.
func MountsUnder(t testing.TB, dir string) []string {
	t.Helper()
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(mounts))
	for i, m := range mounts {
		out[i] = m.Mountpoint
	}
	return out
}

var mountProbe struct {
	once sync.Once
	ok   bool
}

// CanMountTmpfs reports whether this process may mount a tmpfs (root with
// CAP_SYS_ADMIN), as the plugin tries to for each MPS claim's shm directory.
func CanMountTmpfs() bool {
	mountProbe.once.Do(func() {
		dir, err := os.MkdirTemp("", "gpudra-mount-probe-")
		if err != nil {
			return
		}
		defer os.Remove(dir)
		if unix.Mount("gpudra-mount-probe", dir, "tmpfs", 0, "size=4k") == nil {
			mountProbe.ok = true
			_ = unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	return mountProbe.ok
}

// UnmountUnder unmounts everything mounted at or below dir, last mounted first.
func UnmountUnder(t testing.TB, dir string) {
	t.Helper()
	mounts := MountsUnder(t, dir)
	for k := len(mounts) - 1; k >= 0; k-- {
		if err := unix.Unmount(mounts[k], unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", mounts[k], err)
		}
	}
}

// DirMode is dir's permission bits with the sticky bit.
func DirMode(t testing.TB, dir string) os.FileMode {
	t.Helper()
	info, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !info.IsDir() {
		t.Fatalf("%s is not a directory", dir)
	}
	return info.Mode() & (os.ModePerm | os.ModeSticky)
}

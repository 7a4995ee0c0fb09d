package mps_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpudra/gpudra/kubeletplugin/mps"
	"github.com/gpudra/gpudra/kubeletplugin/mps/mpstest"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// TestMain runs the test binary as Process runs the plugin's program (its Self) for
// a daemon with a shm directory (mpstest.Main).
func TestMain(m *testing.M) { mpstest.Main(m) }

var (
	writeScript    = mpstest.WriteControl
	fakeMPSControl = mpstest.FakeControl
	canMountTmpfs  = mpstest.CanMountTmpfs
	mountsUnder    = mpstest.MountsUnder
	unmountUnder   = mpstest.UnmountUnder
	mode           = mpstest.DirMode
)

func TestProcessStartsTheDaemonAppliesLimitsAndQuits(t *testing.T) {
	p := mps.Process{Binary: writeScript(t, fakeMPSControl), Timeout: 10 * time.Second}
	if err := os.WriteFile(filepath.Join(filepath.Dir(p.Binary), "nvidia-cuda-mps-server"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	d := prepared.MPSDaemon{PipeDir: filepath.Join(dir, "pipe"), LogDir: filepath.Join(dir, "log"),
		Devices: []string{"GPU-a", "GPU-b"}, ActiveThreadPercent: 50, PinnedMemoryMiB: []int64{1024, 0}}
	pid, err := p.Start(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(d.PipeDir) })
	if pid <= 0 {
		t.Errorf("pid %d", pid)
	}
	if running, _ := p.Running(d.PipeDir); !running {
		t.Fatal("daemon not running after Start")
	}
	if running, _ := p.Running(filepath.Join(dir, "other")); running {
		t.Error("a daemon runs in a pipe directory nobody started one in")
	}
	env, _ := os.ReadFile(filepath.Join(d.PipeDir, "daemon.env"))
	for _, kv := range []string{"CUDA_VISIBLE_DEVICES=GPU-a,GPU-b", "CUDA_MPS_PIPE_DIRECTORY=" + d.PipeDir, "CUDA_MPS_LOG_DIRECTORY=" + d.LogDir} {
		if !strings.Contains(string(env), kv+"\n") {
			t.Errorf("daemon environment lacks %s:\n%s", kv, env)
		}
	}
	// The daemon starts nvidia-cuda-mps-server from its PATH: the driver's, beside it,
	// not whatever the plugin's image has.
	server, _ := os.ReadFile(filepath.Join(d.PipeDir, "daemon.server"))
	if want := filepath.Join(filepath.Dir(p.Binary), "nvidia-cuda-mps-server"); strings.TrimSpace(string(server)) != want {
		t.Errorf("the daemon finds nvidia-cuda-mps-server at %q, want %s", strings.TrimSpace(string(server)), want)
	}
	cmds, _ := os.ReadFile(filepath.Join(d.PipeDir, "commands"))
	for _, c := range []string{"get_server_list", "set_default_active_thread_percentage 50", "set_default_device_pinned_mem_limit 0 1024M"} {
		if !strings.Contains(string(cmds), c+"\n") {
			t.Errorf("daemon never got %q; got:\n%s", c, cmds)
		}
	}
	if strings.Contains(string(cmds), "set_default_device_pinned_mem_limit 1") {
		t.Errorf("device 1 has no limit but got one:\n%s", cmds)
	}

	if err := p.Stop(d.PipeDir); err != nil {
		t.Fatal(err)
	}
	if running, _ := p.Running(d.PipeDir); running {
		t.Error("daemon still running after Stop")
	}
	if cmds, _ := os.ReadFile(filepath.Join(d.PipeDir, "commands")); !strings.HasSuffix(string(cmds), "quit\n") {
		t.Errorf("daemon was not told to quit:\n%s", cmds)
	}
	if err := p.Stop(d.PipeDir); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestProcessIsNotFooledByAStalePIDFile(t *testing.T) {
	p := mps.Process{Binary: writeScript(t, fakeMPSControl)}
	pipe := t.TempDir()
	// A live process, but not an MPS control daemon (a pid reused after a reboot).
	if err := os.WriteFile(filepath.Join(pipe, mps.PIDFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		t.Fatal(err)
	}
	if running, _ := p.Running(pipe); running {
		t.Error("a stale pid file of another process counts as a running daemon")
	}
	if err := p.Stop(pipe); err != nil {
		t.Errorf("Stop with a stale pid file: %v", err)
	}
}

func TestProcessFailsClearly(t *testing.T) {
	dir := t.TempDir()
	d := prepared.MPSDaemon{PipeDir: filepath.Join(dir, "pipe"), LogDir: filepath.Join(dir, "log"), Devices: []string{"GPU-a"}}
	missing := mps.Process{Binary: filepath.Join(dir, "usr/bin/nvidia-cuda-mps-control")}
	if _, err := missing.Start(d); err == nil || !strings.Contains(err.Error(), missing.Binary) {
		t.Errorf("missing binary: %v, want an error naming %s", err, missing.Binary)
	}
	// A daemon that never comes up.
	silent := mps.Process{Binary: writeScript(t, "#!/bin/sh\nexit 0\n"), Timeout: 300 * time.Millisecond}
	if _, err := silent.Start(d); err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Errorf("daemon that never answers: %v, want 'not ready'", err)
	}
}

// The daemon of a claim with a shm directory, and every command sent to it, see that
// directory as /dev/shm, in a mount namespace of their own (the plugin re-executes
// itself, here the test binary, with "mps-exec"), as the claim's containers do; the
// plugin's /dev/shm and mounts are unchanged. Without the privilege for a mount
// namespace (not root) the daemon runs in the plugin's, which the test logs.
func TestProcessGivesTheDaemonTheClaimsShmDirectory(t *testing.T) {
	p := mps.Process{Binary: writeScript(t, fakeMPSControl), Timeout: 10 * time.Second}
	dir := t.TempDir()
	t.Cleanup(func() { unmountUnder(t, dir) })
	d := prepared.MPSDaemon{PipeDir: filepath.Join(dir, "pipe"), LogDir: filepath.Join(dir, "log"), ShmDir: filepath.Join(dir, "shm"), Devices: []string{"GPU-a"}}
	privileged := canMountTmpfs()
	// Another claim's shm tmpfs: the daemon's mount namespace starts as a copy of the
	// plugin's, this mount included.
	other := filepath.Join(dir, "other-shm")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if privileged {
		if err := unix.Mount("gpudra-test-shm", other, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(d.ShmDir, 0o755); err != nil {
		t.Fatal(err)
	}
	const marker = "gpudra-claim-shm-marker"
	if err := os.WriteFile(filepath.Join(d.ShmDir, marker), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	devShmMounts := mountsUnder(t, "/dev/shm")

	pid, err := p.Start(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(d.PipeDir) })
	env, _ := os.ReadFile(filepath.Join(d.PipeDir, "daemon.env"))
	if !strings.Contains(string(env), "GPUDRA_MPS_SHM_DIRECTORY="+d.ShmDir+"\n") {
		t.Errorf("daemon environment lacks its shm directory:\n%s", env)
	}
	daemonShm, _ := os.ReadFile(filepath.Join(d.PipeDir, "daemon.shm"))
	clientShm, _ := os.ReadFile(filepath.Join(d.PipeDir, "client.shm"))
	for dir, want := range map[string]os.FileMode{d.PipeDir: 0o755, d.LogDir: 0o755} {
		if got := mode(t, dir); got != want {
			t.Errorf("%s has mode %v, want %v", dir, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join("/dev/shm", marker)); err == nil {
		t.Error("the claim's shm directory is the test's /dev/shm")
	}
	if got := mountsUnder(t, "/dev/shm"); !slices.Equal(got, devShmMounts) {
		t.Errorf("the test's mounts on /dev/shm changed from %v to %v", devShmMounts, got)
	}
	if !privileged {
		t.Logf("uid %d may not make a mount namespace: checking the fallback, the daemon in the plugin's", os.Geteuid())
		if strings.Contains(string(daemonShm), marker) {
			t.Errorf("without a mount namespace the daemon's /dev/shm holds the claim's marker:\n%s", daemonShm)
		}
		return
	}
	t.Logf("uid %d may make mount namespaces: checking the daemon's /dev/shm is %s", os.Geteuid(), d.ShmDir)
	if !strings.Contains(string(daemonShm), marker) {
		t.Errorf("the daemon's /dev/shm is not the claim's shm directory; it holds:\n%s", daemonShm)
	}
	if !strings.Contains(string(clientShm), marker) {
		t.Errorf("the commands sent to the daemon did not run with the claim's /dev/shm; it held:\n%s", clientShm)
	}
	// No leaked mounts: the other claim's tmpfs, copied into the daemon's namespace, is
	// detached there when the plugin unmounts it and removes its directory.
	inDaemon := func() bool {
		raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "mountinfo"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Contains(string(raw), " "+other+" ")
	}
	if !inDaemon() {
		t.Fatalf("the other claim's tmpfs %s is not in the daemon's mount namespace", other)
	}
	if err := unix.Unmount(other, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(other); err != nil {
		t.Fatal(err)
	}
	if inDaemon() {
		t.Errorf("the other claim's tmpfs %s outlives its directory in the daemon's mount namespace", other)
	}
	if err := os.Remove(filepath.Join(d.PipeDir, "client.shm")); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(d.PipeDir); err != nil {
		t.Fatal(err)
	}
	if cmds, _ := os.ReadFile(filepath.Join(d.PipeDir, "commands")); !strings.HasSuffix(string(cmds), "quit\n") {
		t.Errorf("daemon was not told to quit:\n%s", cmds)
	}
	if quit, _ := os.ReadFile(filepath.Join(d.PipeDir, "client.shm")); !strings.Contains(string(quit), marker) {
		t.Errorf("quit was not sent from the daemon's /dev/shm; it held:\n%s", quit)
	}
}

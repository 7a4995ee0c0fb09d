package kubeletplugin_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

// fakeMPSControl stands in for nvidia-cuda-mps-control: "-d" forks a daemon that writes
// its environment and pid file into the pipe directory; without arguments it passes the
// commands on stdin to the daemon (recorded in <pipe>/commands; quit stops it).
const fakeMPSControl = `#!/bin/sh
pipe=${CUDA_MPS_PIPE_DIRECTORY:?}
case "$1" in
-d)
  "$0" serve </dev/null >/dev/null 2>&1 &
  exit 0 ;;
serve)
  env > "$pipe/daemon.env"
  trap 'rm -f "$pipe/nvidia-cuda-mps-control.pid"; exit 0' TERM
  echo $$ > "$pipe/nvidia-cuda-mps-control.pid"
  while :; do sleep 0.05; done ;;
esac
pid=$(cat "$pipe/nvidia-cuda-mps-control.pid" 2>/dev/null) && kill -0 "$pid" 2>/dev/null || { echo "Cannot find MPS control daemon process" >&2; exit 1; }
while read -r cmd; do
  echo "$cmd" >> "$pipe/commands"
  [ "$cmd" = quit ] && kill "$pid"
done
exit 0
`

func writeScript(t *testing.T, body string) string {
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

func TestMPSProcessStartsTheDaemonAppliesLimitsAndQuits(t *testing.T) {
	p := plugin.MPSProcess{Binary: writeScript(t, fakeMPSControl), Timeout: 10 * time.Second}
	dir := t.TempDir()
	d := plugin.MPSDaemon{PipeDir: filepath.Join(dir, "pipe"), LogDir: filepath.Join(dir, "log"),
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

func TestMPSProcessIsNotFooledByAStalePIDFile(t *testing.T) {
	p := plugin.MPSProcess{Binary: writeScript(t, fakeMPSControl)}
	pipe := t.TempDir()
	// A live process, but not an MPS control daemon (a pid reused after a reboot).
	if err := os.WriteFile(filepath.Join(pipe, plugin.MPSPIDFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		t.Fatal(err)
	}
	if running, _ := p.Running(pipe); running {
		t.Error("a stale pid file of another process counts as a running daemon")
	}
	if err := p.Stop(pipe); err != nil {
		t.Errorf("Stop with a stale pid file: %v", err)
	}
}

func TestMPSProcessFailsClearly(t *testing.T) {
	dir := t.TempDir()
	d := plugin.MPSDaemon{PipeDir: filepath.Join(dir, "pipe"), LogDir: filepath.Join(dir, "log"), Devices: []string{"GPU-a"}}
	missing := plugin.MPSProcess{Binary: filepath.Join(dir, "usr/bin/nvidia-cuda-mps-control")}
	if _, err := missing.Start(d); err == nil || !strings.Contains(err.Error(), missing.Binary) {
		t.Errorf("missing binary: %v, want an error naming %s", err, missing.Binary)
	}
	// A daemon that never comes up.
	silent := plugin.MPSProcess{Binary: writeScript(t, "#!/bin/sh\nexit 0\n"), Timeout: 300 * time.Millisecond}
	if _, err := silent.Start(d); err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Errorf("daemon that never answers: %v, want 'not ready'", err)
	}
}

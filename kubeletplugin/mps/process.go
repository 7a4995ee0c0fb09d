package mps

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// PIDFile is the file in its pipe directory where an MPS control daemon writes its
// process id; it goes away when the daemon stops.
const PIDFile = "nvidia-cuda-mps-control.pid"

// mpsShmEnv names, in the environment of a daemon started with a shm directory, that
// directory: Stop reads it to send "quit" from the daemon's /dev/shm.
const mpsShmEnv = "GPUDRA_MPS_SHM_DIRECTORY"

// Process runs the node's nvidia-cuda-mps-control: "-d" starts a daemon, commands
// written to the program's stdin ("echo quit | nvidia-cuda-mps-control") talk to the
// daemon of the CUDA_MPS_PIPE_DIRECTORY in its environment.
type Process struct {
	// Binary is the path of nvidia-cuda-mps-control (the driver installation's).
	Binary string
	// Timeout bounds the wait for a started daemon to answer and for a daemon told to
	// quit to exit; 0 means 30 s.
	Timeout time.Duration
	// Self is the program that runs Binary for a daemon with a shm directory, as
	// "<Self> mps-exec <shm dir> <Binary> [args...]" in a new mount namespace (Exec);
	// "" is this program (/proc/self/exe), whose main must hand ExecCommand to Exec.
	Self string
}

var _ Control = Process{}

func (p Process) timeout() time.Duration {
	if p.Timeout > 0 {
		return p.Timeout
	}
	return 30 * time.Second
}

func (p Process) self() string {
	if p.Self != "" {
		return p.Self
	}
	return "/proc/self/exe"
}

// mpsEnv is the plugin's environment (LD_LIBRARY_PATH finds the driver's libraries) with
// the daemon's directories and devices, and binDir, the directory of
// nvidia-cuda-mps-control, first in PATH: the daemon starts nvidia-cuda-mps-server from
// its PATH, and the driver installs it beside the daemon (the plugin's image, or the
// pod's, has none).
func mpsEnv(binDir, pipeDir, logDir, shmDir string, devices []string) []string {
	var env []string
	path := binDir
	for _, kv := range os.Environ() {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			if p != "" {
				path += ":" + p
			}
			continue
		}
		if !strings.HasPrefix(kv, "CUDA_VISIBLE_DEVICES=") && !strings.HasPrefix(kv, "CUDA_MPS_") && !strings.HasPrefix(kv, mpsShmEnv+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+path)
	env = append(env, "CUDA_MPS_PIPE_DIRECTORY="+pipeDir)
	if logDir != "" {
		env = append(env, "CUDA_MPS_LOG_DIRECTORY="+logDir)
	}
	if shmDir != "" {
		env = append(env, mpsShmEnv+"="+shmDir)
	}
	if devices != nil {
		env = append(env, "CUDA_VISIBLE_DEVICES="+strings.Join(devices, ","))
	}
	return env
}

// run runs Binary with args and waits for it. For a daemon with a shm directory it runs
// "<Self> mps-exec <shm dir> <Binary> args..." in a new mount namespace, where Exec
// binds the shm directory over /dev/shm: the daemon (and the servers it starts), and the
// commands sent to it, see the claim's shm directory as /dev/shm, as the claim's
// containers do, and the plugin's own /dev/shm is unchanged. Where the plugin may not
// make a mount namespace (no CAP_SYS_ADMIN: an unprivileged plugin, tests as a non-root
// user) Binary runs in the plugin's, which the log says: the daemon then shares no
// /dev/shm with the claim's containers.
func (p Process) run(ctx context.Context, shmDir string, env []string, stdin io.Reader, out io.Writer, args ...string) error {
	if shmDir != "" {
		cmd := exec.CommandContext(ctx, p.self(), append([]string{ExecCommand, shmDir, p.Binary}, args...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
		cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, stdin, out, out
		err := cmd.Start()
		if err == nil {
			return cmd.Wait()
		}
		if !errors.Is(err, syscall.EPERM) {
			return err
		}
		logger := klog.Background()
		if len(args) > 0 && args[0] == "-d" {
			logger.Error(err, "No privilege for a mount namespace: the MPS control daemon runs with the plugin's /dev/shm, not the claim's shm directory that the claim's containers mount there; MPS clients will not work with it (run the plugin privileged)",
				"shmDir", shmDir, "binary", p.Binary)
		} else {
			logger.V(4).Info("No privilege for a mount namespace: talking to the MPS control daemon from the plugin's /dev/shm", "shmDir", shmDir)
		}
	}
	cmd := exec.CommandContext(ctx, p.Binary, args...)
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, stdin, out, out
	return cmd.Run()
}

// Start implements Control.
func (p Process) Start(d prepared.MPSDaemon) (int, error) {
	if _, err := os.Stat(p.Binary); err != nil {
		return 0, fmt.Errorf("MPS control daemon %s: %w (set --mps-control-daemon to its path under the driver root)", p.Binary, err)
	}
	dirs := []struct {
		path string
		mode fs.FileMode
	}{{d.PipeDir, PipeMode}, {d.LogDir, LogMode}, {d.ShmDir, ShmMode}}
	for _, dir := range dirs {
		if dir.path == "" {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dir.path), TreeMode); err != nil {
			return 0, fmt.Errorf("creating %s: %w", dir.path, err)
		}
		if err := MkdirMode(dir.path, dir.mode); err != nil {
			return 0, fmt.Errorf("creating %s: %w", dir.path, err)
		}
	}
	// The daemon forks away from "-d"; its output goes to a file, not a pipe that the
	// daemon would keep open.
	startLog := filepath.Join(d.LogDir, "gpudra-start.log")
	out, err := os.Create(startLog)
	if err != nil {
		return 0, err
	}
	defer out.Close()
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout())
	defer cancel()
	if err := p.run(ctx, d.ShmDir, mpsEnv(filepath.Dir(p.Binary), d.PipeDir, d.LogDir, d.ShmDir, d.Devices), nil, out, "-d"); err != nil {
		return 0, fmt.Errorf("%s -d: %w: %s", p.Binary, err, tail(startLog))
	}
	pid, err := p.waitReady(d)
	if err == nil {
		err = p.applyLimits(d)
	}
	if err != nil {
		return 0, errors.Join(err, p.Stop(d.PipeDir))
	}
	return pid, nil
}

// waitReady waits until the daemon has written its pid file and answers get_server_list.
func (p Process) waitReady(d prepared.MPSDaemon) (int, error) {
	deadline := time.Now().Add(p.timeout())
	var last error
	for {
		if pid := p.pid(d.PipeDir); pid > 0 {
			if _, last = p.control(d.PipeDir, d.ShmDir, "get_server_list"); last == nil {
				return pid, nil
			}
		} else {
			last = fmt.Errorf("no live daemon in %s", filepath.Join(d.PipeDir, PIDFile))
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("MPS control daemon in %s not ready after %s: %w; its log: %s", d.PipeDir, p.timeout(), last, tail(filepath.Join(d.LogDir, "control.log")))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p Process) applyLimits(d prepared.MPSDaemon) error {
	var cmds []string
	if d.ActiveThreadPercent > 0 {
		cmds = append(cmds, "set_default_active_thread_percentage "+strconv.Itoa(d.ActiveThreadPercent))
	}
	for k, mib := range d.PinnedMemoryMiB {
		if mib > 0 {
			cmds = append(cmds, fmt.Sprintf("set_default_device_pinned_mem_limit %d %dM", k, mib))
		}
	}
	for _, c := range cmds {
		if _, err := p.control(d.PipeDir, d.ShmDir, c); err != nil {
			return err
		}
	}
	return nil
}

// control sends one command to the daemon listening in pipeDir, whose /dev/shm is
// shmDir ("" for the plugin's), and returns its answer.
func (p Process) control(pipeDir, shmDir, command string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := p.run(ctx, shmDir, mpsEnv(filepath.Dir(p.Binary), pipeDir, "", shmDir, nil), strings.NewReader(command+"\n"), &out); err != nil {
		return "", fmt.Errorf("echo %s | %s: %w: %s", command, p.Binary, err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// pid is the process id of the live daemon listening in pipeDir, 0 when there is none.
// The pid file may be stale (a daemon killed with the plugin's container) and its pid
// reused, so the process must be a live nvidia-cuda-mps-control, of this pipe
// directory where its environment can be read.
func (p Process) pid(pipeDir string) int {
	raw, err := os.ReadFile(filepath.Join(pipeDir, PIDFile))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 0 {
		return 0
	}
	proc := filepath.Join("/proc", strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(proc, "stat"))
	if err != nil {
		return 0
	}
	// "pid (comm) S ...": a zombie has exited.
	if i := bytes.LastIndexByte(stat, ')'); i < 0 || bytes.HasPrefix(stat[i+1:], []byte(" Z")) {
		return 0
	}
	cmdline, err := os.ReadFile(filepath.Join(proc, "cmdline"))
	if err != nil || !bytes.Contains(cmdline, []byte("nvidia-cuda-mps-control")) {
		return 0
	}
	if environ, err := os.ReadFile(filepath.Join(proc, "environ")); err == nil &&
		!bytes.Contains(append([]byte{0}, environ...), []byte("\x00CUDA_MPS_PIPE_DIRECTORY="+pipeDir+"\x00")) {
		return 0
	}
	return pid
}

// daemonEnv is the value of the variable name in the environment of process pid, ""
// when it has none or the environment cannot be read.
func daemonEnv(pid int, name string) string {
	environ, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
	if err != nil {
		return ""
	}
	for _, kv := range bytes.Split(environ, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte(name+"=")); ok {
			return string(v)
		}
	}
	return ""
}

// Running implements Control.
func (p Process) Running(pipeDir string) (bool, error) {
	return p.pid(pipeDir) > 0, nil
}

// Stop implements Control: quit, then wait; a daemon that does not exit in time is
// killed.
func (p Process) Stop(pipeDir string) error {
	pid := p.pid(pipeDir)
	if pid == 0 {
		return nil
	}
	_, quitErr := p.control(pipeDir, daemonEnv(pid, mpsShmEnv), "quit")
	if p.waitExit(pid, pipeDir, p.timeout()) {
		return nil
	}
	_ = unix.Kill(pid, unix.SIGKILL)
	if p.waitExit(pid, pipeDir, 5*time.Second) {
		return nil
	}
	return fmt.Errorf("MPS control daemon %d in %s did not exit after quit (%v) and SIGKILL", pid, pipeDir, quitErr)
}

// waitExit waits until pid no longer is the daemon of pipeDir. A daemon orphaned to the
// plugin (when the plugin is its container's first process) is reaped here.
func (p Process) waitExit(pid int, pipeDir string, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for {
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		if p.pid(pipeDir) != pid {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tail is the end of a log file, for error messages.
func tail(path string) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	s := strings.TrimSpace(string(raw))
	if len(s) > 500 {
		s = "..." + s[len(s)-500:]
	}
	if s == "" {
		return "(empty)"
	}
	return s
}

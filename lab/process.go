package lab

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// children remembers the processes this process started, so that a wait can notice at once
// that a component exited instead of timing out.
var children = struct {
	sync.Mutex
	exited map[int]chan struct{}
	err    map[int]error
}{exited: map[int]chan struct{}{}, err: map[int]error{}}

// startProcess starts a lab component detached from the caller's session (it outlives
// `gpudra lab up`), with stdout and stderr appended to its log, and records its PID file.
func startProcess(l Layout, name string, argv, env []string) (Component, error) {
	c := Component{Name: name, Argv: argv, Env: env, Log: l.Log(name)}
	for _, d := range []string{l.LogDir(), filepath.Dir(l.PIDFile(name))} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return c, err
		}
	}
	logf, err := os.OpenFile(c.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return c, fmt.Errorf("%s: open log: %w", name, err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "=== %s: gpudra lab starts %s\n", time.Now().Format(time.RFC3339), strings.Join(argv, " "))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return c, fmt.Errorf("%s: start %s: %w", name, argv[0], err)
	}
	c.PID = cmd.Process.Pid
	done := make(chan struct{})
	children.Lock()
	children.exited[c.PID] = done
	children.Unlock()
	go func() {
		err := cmd.Wait()
		children.Lock()
		children.err[c.PID] = err
		children.Unlock()
		close(done)
	}()
	if err := os.WriteFile(l.PIDFile(name), []byte(strconv.Itoa(c.PID)+"\n"), 0o600); err != nil {
		return c, err
	}
	klog.V(2).InfoS("Started lab component", "component", name, "pid", c.PID, "log", c.Log)
	return c, nil
}

// exitedEarly reports whether a component has exited, and how. For a process this process
// started, its reaper knows for sure; for others the /proc command line decides. (Right after
// exec, /proc/<pid>/cmdline can briefly be empty, so it must not be used for our own children.)
func exitedEarly(c Component) (bool, error) {
	children.Lock()
	done, ok := children.exited[c.PID]
	children.Unlock()
	if !ok {
		if !running(c) {
			return true, errors.New("is not running")
		}
		return false, nil
	}
	select {
	case <-done:
		children.Lock()
		defer children.Unlock()
		if err := children.err[c.PID]; err != nil {
			return true, err
		}
		return true, errors.New("exited with status 0")
	default:
		return false, nil
	}
}

// alive reports whether c still runs (see exitedEarly).
func alive(c Component) bool {
	gone, _ := exitedEarly(c)
	return !gone
}

// running reports whether c's PID still runs c's command line (a reused PID does not count,
// nor does a zombie, whose command line is empty).
func running(c Component) bool {
	if c.PID <= 0 {
		return false
	}
	got, err := os.ReadFile("/proc/" + strconv.Itoa(c.PID) + "/cmdline")
	if err != nil {
		return false
	}
	want := []byte(strings.Join(c.Argv, "\x00") + "\x00")
	return bytes.Equal(got, want)
}

// stopProcesses sends SIGTERM to every component still running its recorded command line,
// waits up to grace for them to exit, then SIGKILLs what is left. It never signals a PID
// whose command line does not match.
func stopProcesses(cs []Component, grace time.Duration) error {
	var live []Component
	for _, c := range cs {
		if !alive(c) {
			continue
		}
		if err := syscall.Kill(c.PID, syscall.SIGTERM); err == nil {
			live = append(live, c)
		}
	}
	live = waitGone(live, grace)
	for _, c := range live {
		klog.InfoS("Component did not stop on SIGTERM, killing it", "component", c.Name, "pid", c.PID)
		_ = syscall.Kill(c.PID, syscall.SIGKILL)
	}
	live = waitGone(live, 10*time.Second)
	if len(live) > 0 {
		var names []string
		for _, c := range live {
			names = append(names, fmt.Sprintf("%s (pid %d)", c.Name, c.PID))
		}
		return fmt.Errorf("still running after SIGKILL: %s", strings.Join(names, ", "))
	}
	return nil
}

func waitGone(cs []Component, d time.Duration) []Component {
	deadline := time.Now().Add(d)
	for {
		var left []Component
		for _, c := range cs {
			if alive(c) {
				left = append(left, c)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// logTail returns the last n lines of a log file, for failure reports.
func logTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	return lastLines(string(data), n)
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ComponentError says which component failed and where its log is.
type ComponentError struct {
	Component string
	Log       string
	Err       error
}

func (e *ComponentError) Error() string {
	msg := fmt.Sprintf("%s failed: %v", e.Component, e.Err)
	if e.Log == "" {
		return msg
	}
	return fmt.Sprintf("%s\n  log: %s\n  last lines:\n%s", msg, e.Log, indent(logTail(e.Log, 15), "    "))
}

func (e *ComponentError) Unwrap() error { return e.Err }

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

package lab

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestStopProcessesStopsOnlyMatchingCommandLines(t *testing.T) {
	l := Layout{Root: t.TempDir()}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatalf("no sleep binary: %v", err)
	}
	c, err := startProcess(l, "sleeper", []string{sleep, "300"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !alive(c) {
		t.Fatal("a started process does not count as running")
	}
	other := exec.Command(sleep, "301")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer other.Process.Kill() //nolint:errcheck
	// A record whose PID now runs something else must never be signalled.
	impostor := Component{Name: "impostor", PID: other.Process.Pid, Argv: []string{sleep, "300"}}
	if running(impostor) {
		t.Fatal("a PID running another command line counts as running")
	}
	if err := stopProcesses([]Component{c, impostor}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if alive(c) {
		t.Fatal("still running after stopProcesses")
	}
	gone, why := exitedEarly(c)
	if !gone || why == nil {
		t.Fatalf("exitedEarly = %v, %v; want exited with a reason", gone, why)
	}
	if other.ProcessState != nil {
		t.Fatal("the impostor's process was touched")
	}
	if err := other.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the unrelated process is gone: %v", err)
	}
}

func TestComponentErrorNamesComponentAndLog(t *testing.T) {
	l := Layout{Root: t.TempDir()}
	c, err := startProcess(l, "failing", []string{"/bin/sh", "-c", "echo boom: bad flag --x >&2; exit 3"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = waitReady(t.Context(), c, "ready", 10*time.Second, func(context.Context) error { return errors.New("not yet") })
	var ce *ComponentError
	if !errors.As(err, &ce) {
		t.Fatalf("got %v, want a ComponentError", err)
	}
	msg := err.Error()
	for _, want := range []string{"failing failed", "exited", l.Log("failing"), "boom: bad flag --x"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
}

func TestSecondLabIsRefused(t *testing.T) {
	t.Setenv("GPUDRA_CACHE", t.TempDir())
	a, b := t.TempDir(), t.TempDir()
	if err := claimActive(a); err != nil {
		t.Fatal(err)
	}
	err := claimActive(b)
	var running *RunningLabError
	if !errors.As(err, &running) || running.Dir != a {
		t.Fatalf("second lab: got %v, want a RunningLabError naming %s", err, a)
	}
	if !strings.Contains(err.Error(), "gpudra lab down --dir "+a) {
		t.Errorf("refusal %q does not say how to stop the running lab", err)
	}
	if err := releaseActive(a); err != nil {
		t.Fatal(err)
	}
	if err := claimActive(b); err != nil {
		t.Fatalf("after the first lab is gone: %v", err)
	}
}

// A component that is never ready is reported with why its last full check failed, not with
// the deadline that cut the final one short (a rate-limited client says only "would exceed
// context deadline").
func TestNotReadySaysWhyTheLastFullCheckFailed(t *testing.T) {
	l := Layout{Root: t.TempDir()}
	c, err := startProcess(l, "slow", []string{"/bin/sleep", "30"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stopProcesses([]Component{c}, time.Second) })
	err = waitReady(t.Context(), c, "answering its webhooks", time.Second, func(ctx context.Context) error {
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < 500*time.Millisecond {
			<-ctx.Done()
			return fmt.Errorf("client rate limiter Wait returned an error: %w", ctx.Err())
		}
		return errors.New(`admission webhook "vtrainjob.kb.io" denied the request`)
	})
	if err == nil {
		t.Fatal("a component that never answered was reported ready")
	}
	if msg := err.Error(); !strings.Contains(msg, "vtrainjob.kb.io") || strings.Contains(msg, "rate limiter") {
		t.Errorf("error %q should give the webhook's answer, not the deadline's", msg)
	}
}

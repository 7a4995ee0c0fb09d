package mps_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpudra/gpudra/kubeletplugin/mps"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// The daemon pod's process starts the daemon, notices when it dies (the container then
// restarts), and stops it when the pod is deleted.
func TestRunDaemonKeepsTheDaemonUntilThePodGoes(t *testing.T) {
	pipe := filepath.Join(t.TempDir(), "pipe")
	d := prepared.MPSDaemon{PipeDir: pipe, Devices: []string{"GPU-a"}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mps.RunDaemon(ctx, mps.Simulated{}, d, 10*time.Millisecond) }()
	waitFor(t, func() bool { ok, _ := mps.Simulated{}.Running(pipe); return ok })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("stopped with %v", err)
	}
	if ok, _ := (mps.Simulated{}).Running(pipe); ok {
		t.Error("the daemon still runs after its pod went")
	}

	go func() {
		done <- mps.RunDaemon(context.Background(), mps.Simulated{}, d, 10*time.Millisecond)
	}()
	waitFor(t, func() bool { ok, _ := mps.Simulated{}.Running(pipe); return ok })
	if err := os.Remove(filepath.Join(pipe, mps.SimulatedFile)); err != nil { // it dies
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "exited") {
			t.Errorf("a daemon that died: %v, want an error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a daemon that died went unnoticed")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(errors.New("timed out"))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

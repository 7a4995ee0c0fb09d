package mps_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

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

// Waiting for a daemon's Deployment ends when it is ready (or gone), and otherwise fails
// after the timeout naming the Deployment and what it waited for.
func TestPodsWaitForTheDeployment(t *testing.T) {
	const pipe = "/var/lib/gpudra/mps/0b6e4c6a-1d5e-4f6b-9c1a-2b3c4d5e6f70/pipe"
	name, _, err := mps.PodName(pipe)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ready := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "gpudra"}, Status: appsv1.DeploymentStatus{ReadyReplicas: 1}}
	starting := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "gpudra"}}
	pods := func(objs ...runtime.Object) mps.Pods {
		return mps.Pods{Client: fake.NewClientset(objs...), Namespace: "gpudra", NodeName: "node-a", Timeout: 100 * time.Millisecond, Poll: 5 * time.Millisecond}
	}
	for _, tc := range []struct {
		name    string
		wait    func(mps.Pods) error
		objs    []runtime.Object
		wantErr string
	}{
		{"ready", func(p mps.Pods) error { return p.WaitReady(ctx, pipe) }, []runtime.Object{ready}, ""},
		{"not ready", func(p mps.Pods) error { return p.WaitReady(ctx, pipe) }, []runtime.Object{starting}, "Deployment gpudra/" + name + " on node node-a) is not ready after"},
		{"never made", func(p mps.Pods) error { return p.WaitReady(ctx, pipe) }, nil, "is not ready after"},
		{"gone", func(p mps.Pods) error { return p.WaitGone(ctx, pipe) }, nil, ""},
		{"not gone", func(p mps.Pods) error { return p.WaitGone(ctx, pipe) }, []runtime.Object{ready}, "Deployment gpudra/" + name + " is not gone"},
	} {
		err := tc.wait(pods(tc.objs...))
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v, want one with %q", tc.name, err, tc.wantErr)
		}
	}
}

package kubeletplugin_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
	"github.com/gpudra/gpudra/kubeletplugin/mps"
	"github.com/gpudra/gpudra/kubeletplugin/mps/mpstest"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// flakyTimeSlicer is the node's time-slicer with nvidia-smi failing while fail is set.
type flakyTimeSlicer struct {
	*fakeTimeSlicer
	mu   sync.Mutex
	fail error
}

func (f *flakyTimeSlicer) SetTimeSlice(ctx context.Context, gpu string, iv api.TimeSliceInterval) error {
	f.mu.Lock()
	err := f.fail
	f.mu.Unlock()
	if err != nil {
		return err
	}
	return f.fakeTimeSlicer.SetTimeSlice(ctx, gpu, iv)
}

func (f *flakyTimeSlicer) failWith(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

func (f *fakeMPS) failWith(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failStart = err
}

// assertStillPrepared checks that the claim keeps what its containers use: its CDI spec,
// its checkpoint entry (PrepareCompleted) and, under MPS, its pipe directory.
func assertStillPrepared(t *testing.T, n *node, c string, spec bool, pipe string) {
	t.Helper()
	if !spec {
		t.Errorf("claim %s lost its CDI spec", c)
	}
	claims, _, err := plugin.ReadCheckpoint(n.cfg.CheckpointDir)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, st := range claims {
		found = found || st == prepared.PrepareCompleted
	}
	if len(claims) != 1 || !found {
		t.Errorf("checkpoint holds %v, want the claim PrepareCompleted", claims)
	}
	if pipe != "" {
		if _, err := os.Stat(pipe); err != nil {
			t.Errorf("claim %s lost its MPS pipe directory: %v", c, err)
		}
	}
}

// claimEvents are the Events about the named claim.
func claimEvents(t *testing.T, client *fake.Clientset, namespace, name string) []eventsv1.Event {
	t.Helper()
	list, err := client.EventsV1().Events(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "ResourceClaim" && e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// A prepared MPS claim whose daemon cannot be started again when the plugin restarts
// keeps its CDI spec, directories and checkpoint entry (its pod's containers use them);
// the plugin starts, says so in its log, a metric and an Event on the claim.
func TestPreparedMPSClaimKeepsItsFilesWhenItsDaemonCannotRestart(t *testing.T) {
	client := fake.NewClientset()
	n := newNode(t, "dgx-h100", func(c *plugin.Config) { c.RepairBackoff = time.Hour; c.Client = client })
	c := n.allocate(gpuClaim("2", mpsConfig))
	mustPrepare(t, n.newDriver(nil), c)
	pipe, _ := mpsMounts(t, n, c)

	n.mps.kill()
	n.mps.failWith(errors.New("nvidia-cuda-mps-control: GPU is busy"))
	d := n.newDriver(nil) // starts: no error

	assertStillPrepared(t, n, c.Name, n.spec(c) != nil, pipe)
	waitForMetric(t, d, `gpudra_plugin_repair_failures_total{part="mps-daemon"} 1`)
	waitForMetric(t, d, `gpudra_plugin_unrepaired_claims 1`)
	var events []eventsv1.Event
	waitFor(t, func() bool { events = claimEvents(t, client, c.Namespace, c.Name); return len(events) > 0 })
	if e := events[0]; e.Type != "Warning" || e.Reason != "RepairFailed" || !strings.Contains(e.Note, "MPS control daemon") || !strings.Contains(e.Note, "GPU is busy") {
		t.Errorf("Event %s %s %q, want a Warning RepairFailed naming the MPS control daemon and why", e.Type, e.Reason, e.Note)
	}
	// The kubelet unprepares the claim when its pod goes: nothing is left.
	if err := unprepare(t, d, c); err != nil {
		t.Fatal(err)
	}
	assertClean(t, n, c)
}

// The daemon that could not be restarted at start-up is restarted in the background
// once it can be, and the claim goes on as prepared.
func TestPreparedClaimsDaemonIsRestartedOnceItCanBe(t *testing.T) {
	n := newNode(t, "dgx-h100", func(c *plugin.Config) { c.RepairBackoff = 10 * time.Millisecond })
	c := n.allocate(gpuClaim("2", mpsConfig))
	mustPrepare(t, n.newDriver(nil), c)
	n.mps.kill()
	n.mps.failWith(errors.New("nvidia-cuda-mps-control: GPU is busy"))
	d := n.newDriver(nil)
	time.Sleep(50 * time.Millisecond) // a few failed tries
	if len(n.mps.daemons()) != 0 {
		t.Fatal("a daemon runs while it cannot start")
	}
	n.mps.failWith(nil)
	waitFor(t, func() bool { return len(n.mps.daemons()) == 1 })
	waitForMetric(t, d, `gpudra_plugin_unrepaired_claims 0`)
	pipe, _ := mpsMounts(t, n, c)
	if _, ok := n.mps.daemons()[pipe]; !ok {
		t.Errorf("running daemons %v, want the claim's in %s", n.mps.daemons(), pipe)
	}
	mustPrepare(t, d, c) // the kubelet's prepare of the running claim
	if err := unprepare(t, d, c); err != nil {
		t.Fatal(err)
	}
	assertClean(t, n, c)
}

// nvidia-smi failing when the plugin restarts (a GPU reset forgot the claim's
// time-slice) neither rolls the claim back nor keeps the plugin from starting; the
// time-slice is set once nvidia-smi works.
func TestTimeSliceThatCannotBeSetAtStartUpIsSetLater(t *testing.T) {
	var ts *flakyTimeSlicer
	n := newNode(t, "dgx-h100", func(c *plugin.Config) {
		ts = &flakyTimeSlicer{fakeTimeSlicer: c.TimeSlicer.(*fakeTimeSlicer)}
		c.TimeSlicer, c.RepairBackoff = ts, 10*time.Millisecond
	})
	c := n.allocate(gpuClaim("2", timeSlicing("Long")))
	mustPrepare(t, n.newDriver(nil), c)
	gpu2 := n.backendGPU(2)
	n.timeSlices.mu.Lock()
	n.timeSlices.intervals[gpu2] = api.IntervalDefault // a GPU reset forgets it
	n.timeSlices.mu.Unlock()
	ts.failWith(errors.New("nvidia-smi: Unable to determine the device handle"))

	d, err := plugin.New(context.Background(), n.cfg)
	if err != nil {
		t.Fatalf("the plugin does not start while nvidia-smi fails: %v", err)
	}
	t.Cleanup(d.Stop)
	assertStillPrepared(t, n, c.Name, n.spec(c) != nil, "")
	ts.failWith(nil)
	waitFor(t, func() bool { return n.timeSlices.interval(gpu2) == api.IntervalLong })
	if err := unprepare(t, d, c); err != nil {
		t.Fatal(err)
	}
	assertClean(t, n, c)
}

// A claim's MPS control daemon that the plugin runs as a process and that exits while
// the plugin runs (an earlier plugin's container going away, a crash) is started again.
func TestMPSProcessDaemonThatExitsIsRestarted(t *testing.T) {
	bin := mpstest.WriteControl(t, mpstest.FakeControl)
	n := newNode(t, "dgx-h100", func(c *plugin.Config) {
		c.MPS = mps.Process{Binary: bin, Timeout: 10 * time.Second}
		c.MPSCheckInterval, c.RepairBackoff = 20*time.Millisecond, 10*time.Millisecond
	})
	d := n.newDriver(nil)
	t.Cleanup(d.Stop)
	c := n.allocate(gpuClaim("2", mpsConfig))
	mustPrepare(t, d, c)
	pipe, _ := mpsMounts(t, n, c)
	t.Cleanup(func() { _ = unprepare(t, d, c) })
	pid := daemonPID(t, pipe)
	if pid == 0 {
		t.Fatal("no daemon after the prepare")
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { p := daemonPID(t, pipe); return p != 0 && p != pid })
	if running, _ := (mps.Process{Binary: bin}).Running(pipe); !running {
		t.Error("the restarted daemon does not answer")
	}
	if err := unprepare(t, d, c); err != nil {
		t.Fatal(err)
	}
	if p := daemonPID(t, pipe); p != 0 {
		t.Errorf("daemon %d still runs after the unprepare", p)
	}
}

// daemonPID is the pid in the daemon's pid file, 0 when there is none.
func daemonPID(t *testing.T, pipe string) int {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(pipe, mps.PIDFile))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	return pid
}

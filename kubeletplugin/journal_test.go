package kubeletplugin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
	"github.com/gpudra/gpudra/kubeletplugin/checkpoint"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// crashAtNth is a hook that kills the plugin the nth time it reaches point, and
// remembers every point reached.
func crashAtNth(point string, nth int, seen *[]string) plugin.Hook {
	count := 0
	return func(p string) error {
		*seen = append(*seen, p)
		if p == point {
			if count++; count == nth {
				panic(crash{p})
			}
		}
		return nil
	}
}

// A compaction (checkpoint of the next generation in place, its journal not yet) killed
// at start-up, in a prepare or in an unprepare: after a restart the claim is prepared
// (when the PrepareCompleted record was the one being compacted) or clean, and the
// kubelet's retries end prepared once, then clean.
func TestRestartAfterCrashWhileCompactingEndsClean(t *testing.T) {
	exercised := 0
	for _, cl := range crashClaims {
		t.Run(cl.name, func(t *testing.T) {
			for nth := 1; ; nth++ {
				n := crashNode(t, false, cl.hami)
				c := n.allocate(cl.spec)
				var seen []string
				phase := "start-up"
				crashed := run(t, func() {
					d := n.newDriver(crashAtNth(plugin.PointCheckpointCompacted, nth, &seen))
					plugin.CompactJournalAfterEachRecord(d)
					phase = "prepare"
					mustPrepare(t, d, c)
					phase = "unprepare"
					if err := unprepare(t, d, c); err != nil {
						t.Fatal(err)
					}
				})
				if !crashed {
					// start-up (2), PrepareStarted, PrepareCompleted, UnprepareStarted, removal
					if nth-1 < 6 {
						t.Errorf("only %d compactions", nth-1)
					}
					return
				}
				exercised++
				d := n.newDriver(nil)
				if phase == "prepare" && slices.Contains(seen, plugin.PointCDIWritten) {
					assertPrepared(t, n, c, cl.mig)
					assertSharing(t, n, cl.mps, cl.slice)
				} else {
					assertClean(t, n, c)
				}
				if phase != "unprepare" {
					mustPrepare(t, d, c)
					assertPrepared(t, n, c, cl.mig)
					assertSharing(t, n, cl.mps, cl.slice)
				}
				if err := unprepare(t, d, c); err != nil {
					t.Fatal(err)
				}
				assertClean(t, n, c)
				if claims, _, err := plugin.ReadCheckpoint(n.cfg.CheckpointDir); err != nil || len(claims) != 0 {
					t.Errorf("checkpoint after unprepare: %v %v", claims, err)
				}
			}
		})
	}
	t.Logf("compaction crashes exercised: %d", exercised)
}

// testdata/checkpoint-v1.json was written by the plugin before the journal (commit
// eb41f57): claims v1-whole (GPU 2) and v1-mig (1g.10gb on GPU 0) prepared, v1-started
// (GPU 3 with a Long time-slice) killed after writing its CDI spec.
func TestV1CheckpointIsMigrated(t *testing.T) {
	n := newNode(t, "dgx-h100")
	raw, err := os.ReadFile("testdata/checkpoint-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(n.cfg.CheckpointDir, 0o750); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(n.cfg.CheckpointDir, checkpoint.File)
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	// What the interrupted prepare had done: its GPU's time-slice.
	uuid3 := n.backendGPU(3)
	_ = n.timeSlices.SetTimeSlice(context.Background(), uuid3, api.IntervalLong)

	d := n.newDriver(nil)
	if aside, _ := filepath.Glob(path + ".corrupt-*"); len(aside) != 0 {
		t.Errorf("v1 checkpoint set aside as corrupt: %v", aside)
	}
	claims, _, err := plugin.ReadCheckpoint(n.cfg.CheckpointDir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[types.UID]prepared.State{"v1-whole": prepared.PrepareCompleted, "v1-mig": prepared.PrepareCompleted}
	if !reflect.DeepEqual(claims, want) {
		t.Errorf("migrated claims %v, want %v", claims, want)
	}
	var f struct{ Version string }
	if raw, err := os.ReadFile(path); err != nil || json.Unmarshal(raw, &f) != nil || f.Version != checkpoint.Version {
		t.Errorf("checkpoint after start-up is %q (%v), want %s", f.Version, err, checkpoint.Version)
	}
	if iv := n.timeSlices.interval(uuid3); iv != api.IntervalDefault {
		t.Errorf("interrupted prepare's GPU left at time-slice %s", iv)
	}
	// The simulated GPUs are new: the MIG claim's instance is re-created, the specs rewritten.
	if got := n.migInstances(); !reflect.DeepEqual(got, []placement{{0, 0, 1}}) {
		t.Errorf("MIG instances %v, want the migrated claim's", got)
	}
	claim := func(uid string) *resourceapi.ResourceClaim {
		c := &resourceapi.ResourceClaim{}
		c.Namespace, c.Name, c.UID = "default", uid, types.UID(uid)
		return c
	}
	for uid, device := range map[string]string{"v1-whole": "gpu-2", "v1-mig": "gpu-0-mig-1g10gb-0"} {
		c := claim(uid)
		if n.spec(c) == nil {
			t.Errorf("%s has no CDI spec", uid)
		}
		devs := mustPrepare(t, d, c) // the kubelet asks again: the recorded devices
		if len(devs) != 1 || devs[0].DeviceName != device || devs[0].CDIDeviceIDs[0] != "gpudra.dev/gpu="+uid+"-"+device {
			t.Errorf("%s prepares as %+v", uid, devs)
		}
	}
	uids := []string{"v1-whole", "v1-mig", "v1-started"}
	for _, uid := range uids {
		if err := unprepare(t, d, claim(uid)); err != nil {
			t.Fatal(err)
		}
	}
	for _, uid := range uids {
		assertClean(t, n, claim(uid))
	}
	if claims, _, err := plugin.ReadCheckpoint(n.cfg.CheckpointDir); err != nil || len(claims) != 0 {
		t.Errorf("checkpoint after unprepare: %v %v", claims, err)
	}
}

// A journal line that is not the last and does not check out is corruption (a torn
// write is always the last line): the checkpoint and journal are set aside and the
// claims rebuilt from the CDI specs.
func TestCorruptJournalIsSetAsideAndRebuilt(t *testing.T) {
	n, mig, whole, wantMIG := preparedMIGAndWhole(t)
	path := filepath.Join(n.cfg.CheckpointDir, checkpoint.JournalFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(raw, []byte("\n"))
	if len(lines) < 4 {
		t.Fatalf("journal has %d lines", len(lines))
	}
	second := len(lines[0]) + len(lines[1])/2 // inside the first record
	raw[second] ^= 1
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	recoversFromCorruption(t, n, "journal", path, mig, wantMIG, whole)
}

// Two plugin instances on one node (a rolling update) take turns under the node lock:
// each sees what the other recorded, also across the other's compactions.
func TestTwoPluginInstancesShareTheCheckpoint(t *testing.T) {
	n := newNode(t, "dgx-h100")
	old := n.newDriver(nil)
	whole := n.allocate(wholeGPU)
	mustPrepare(t, old, whole)
	updated := n.newDriver(nil) // its start-up compacts: old's journal is replaced
	plugin.CompactJournalAfterEachRecord(updated)

	mig := n.allocate(migClaim)
	share := n.allocate(shareClaim("4Gi", "20", ""))
	mustPrepare(t, updated, mig)
	mustPrepare(t, old, share) // appends to the journal updated wrote
	again := whole.DeepCopy()
	again.UID = "another-claim-for-gpu-2"
	if _, err := prepare(t, updated, again); err == nil {
		t.Error("updated plugin prepared GPU 2 a second time: it does not see old's claim")
	}
	if err := unprepare(t, updated, share); err != nil { // old's claim, updated compacts
		t.Fatal(err)
	}
	if err := unprepare(t, old, mig); err != nil { // updated's claim
		t.Fatal(err)
	}
	assertSharing(t, n, 0, api.IntervalDefault)
	claims, _, err := plugin.ReadCheckpoint(n.cfg.CheckpointDir)
	if want := map[types.UID]prepared.State{whole.UID: prepared.PrepareCompleted}; err != nil || !reflect.DeepEqual(claims, want) {
		t.Errorf("checkpoint %v (%v), want %v", claims, err, want)
	}
	n.newDriver(nil)
	assertPrepared(t, n, whole, false)
	if n.specCount() != 1 {
		t.Errorf("%d CDI specs, want whole's", n.specCount())
	}
}

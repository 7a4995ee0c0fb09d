package kubeletplugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// storeFiles returns the checkpoint and journal that a store writes for a few prepares
// and unprepares, as fuzz seeds.
func storeFiles(f *testing.F) (checkpoint, journal []byte) {
	f.Helper()
	dir := f.TempDir()
	s := newCheckpointStore(dir, nil, klog.Background())
	defer s.closeJournal()
	d := &checkpointData{BootID: "boot-1", Claims: map[types.UID]*prepared.Claim{}}
	if err := s.compact(d); err != nil {
		f.Fatal(err)
	}
	whole := &prepared.Claim{UID: "u-whole", Namespace: "default", Name: "whole", State: prepared.PrepareCompleted,
		Devices: []prepared.Device{{Request: "gpu", Pool: "node-a", Device: "gpu-2", Type: "gpu", GPUs: []int{2},
			CDI: cdi.Device{Name: "u-whole-gpu-2", Device: "gpu-2", GPUs: []cdi.GPU{{Index: 2, Minor: 2, UUID: "GPU-2"}}, MemoryBytes: 1 << 30, ComputePercent: 100}}}}
	mps := &prepared.Claim{UID: "u-mps", Namespace: "ml", Name: "mps", PodClaimName: "gpu", State: prepared.PrepareStarted,
		Devices: []prepared.Device{{Request: "share", Pool: "node-a", Device: "gpu-0-share", ShareID: "s1", Type: "share", GPUs: []int{0},
			MIG: &prepared.MIGInstance{Parent: 0, Profile: "1g.10gb", GIProfileID: 19, Start: 2, Size: 1}}},
		MPS: &prepared.MPSDaemon{PipeDir: "/run/mps/u-mps/pipe", LogDir: "/run/mps/u-mps/log", Devices: []string{"GPU-0"}}}
	// An unprepare with only its GPUs' time-slices left to give back.
	left := &prepared.Claim{UID: "u-left", Namespace: "default", Name: "left", State: prepared.UnprepareStarted, TimeSlicesLeft: []string{"GPU-1", "GPU-3"}}
	for _, step := range []func() error{
		func() error { d.Claims[whole.UID] = whole; return s.put(d, whole, "") },
		func() error { d.Claims[mps.UID] = mps; return s.put(d, mps, "") },
		func() error { delete(d.Claims, mps.UID); return s.remove(d, mps.UID, "") },
		func() error { d.Claims[left.UID] = left; return s.put(d, left, "") },
	} {
		if err := step(); err != nil {
			f.Fatal(err)
		}
	}
	var err error
	if checkpoint, err = os.ReadFile(s.path); err != nil {
		f.Fatal(err)
	}
	if journal, err = os.ReadFile(s.journalPath); err != nil {
		f.Fatal(err)
	}
	return checkpoint, journal
}

// payloads returns the checkpoint's data and the journal's lines without their checksums.
func payloads(f *testing.F, checkpoint, journal []byte) (data, lines []byte) {
	f.Helper()
	var cf checkpointFile
	if err := json.Unmarshal(checkpoint, &cf); err != nil {
		f.Fatal(err)
	}
	for l := range bytes.Lines(journal) {
		payload, ok := checkLine(bytes.TrimSuffix(l, []byte("\n")))
		if !ok {
			f.Fatalf("journal line %q does not check out", l)
		}
		lines = append(append(lines, payload...), '\n')
	}
	return cf.Data, lines
}

// checksummed makes the files a plugin would write from a checkpoint's data and
// journal lines (a last line without a newline stays a torn line, unchecksummed), so
// that fuzzing gets past the checksums.
func checksummed(data, lines []byte) (checkpoint, journal []byte) {
	checkpoint = []byte(`{"version":"` + CheckpointVersion + `","checksum":"` + checksum(data) + `","data":`)
	checkpoint = append(append(checkpoint, data...), '}')
	for len(lines) > 0 {
		end := bytes.IndexByte(lines, '\n')
		if end < 0 {
			journal = append(journal, lines...)
			break
		}
		journal = append(journal, line(lines[:end])...)
		lines = lines[end+1:]
	}
	return checkpoint, journal
}

// FuzzCheckpointLoad loads any checkpoint and journal, as written (raw) or as a plugin
// would checksum them: the store either refuses them as ErrCorruptCheckpoint (so that
// the plugin sets them aside) or returns claims that a compaction writes back and a
// second load returns unchanged.
func FuzzCheckpointLoad(f *testing.F) {
	v1, err := os.ReadFile("testdata/checkpoint-v1.json")
	if err != nil {
		f.Fatal(err)
	}
	v2, err := os.ReadFile("testdata/checkpoint-v2.json")
	if err != nil {
		f.Fatal(err)
	}
	v2journal, err := os.ReadFile("testdata/checkpoint-v2.journal")
	if err != nil {
		f.Fatal(err)
	}
	cp, journal := storeFiles(f)
	data, lines := payloads(f, cp, journal)
	f.Add(true, v1, []byte(nil))
	f.Add(true, v2, v2journal)
	f.Add(true, cp, journal)
	f.Add(true, cp, journal[:len(journal)-7]) // a torn last line
	f.Add(true, cp, []byte("\n"))
	f.Add(false, data, lines)
	f.Add(false, data, lines[:len(lines)-7])
	f.Add(false, []byte(`{"bootID":"boot-1","generation":1,"claims":{}}`), lines[:bytes.IndexByte(lines, '\n')+1])
	f.Fuzz(func(t *testing.T, raw bool, checkpoint, journal []byte) {
		if !raw {
			if !json.Valid(checkpoint) {
				return
			}
			checkpoint, journal = checksummed(checkpoint, journal)
		}
		dir := t.TempDir()
		for name, data := range map[string][]byte{CheckpointFile: checkpoint, JournalFile: journal} {
			if data == nil {
				continue
			}
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		s := newCheckpointStore(dir, nil, klog.Background())
		defer s.closeJournal()
		d, err := s.load()
		if err != nil {
			if !errors.Is(err, ErrCorruptCheckpoint) {
				t.Fatalf("load: %v, not an ErrCorruptCheckpoint", err)
			}
			return
		}
		if d.Claims == nil {
			t.Fatal("load returned nil claims")
		}
		for uid, pc := range d.Claims {
			if pc == nil || pc.UID != uid {
				t.Fatalf("claims[%q] is %+v, not a record of claim %s", uid, pc, uid)
			}
		}
		want := &checkpointData{BootID: d.BootID, Generation: d.Generation + 1, Claims: d.Claims}
		if err := s.compact(d); err != nil {
			t.Fatal(err)
		}
		again := newCheckpointStore(dir, nil, klog.Background())
		defer again.closeJournal()
		got, err := again.load()
		if err != nil {
			t.Fatalf("loading the compacted checkpoint: %v", err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("compacted and loaded again:\n%+v\nwant\n%+v", got, want)
		}
	})
}

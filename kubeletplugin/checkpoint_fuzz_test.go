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
	"github.com/gpudra/gpudra/kubeletplugin/checkpoint"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// storeFiles returns the checkpoint and journal that a store writes for a few prepares
// and unprepares, as fuzz seeds.
func storeFiles(f *testing.F) (cpFile, journal []byte) {
	f.Helper()
	dir := f.TempDir()
	s := checkpoint.New(dir, nil, klog.Background())
	defer s.Close()
	d := &checkpoint.Data{BootID: "boot-1", Claims: map[types.UID]*prepared.Claim{}}
	if err := s.Compact(d); err != nil {
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
		func() error { d.Claims[whole.UID] = whole; return s.Put(d, whole, "") },
		func() error { d.Claims[mps.UID] = mps; return s.Put(d, mps, "") },
		func() error { delete(d.Claims, mps.UID); return s.Remove(d, mps.UID, "") },
		func() error { d.Claims[left.UID] = left; return s.Put(d, left, "") },
	} {
		if err := step(); err != nil {
			f.Fatal(err)
		}
	}
	var err error
	if cpFile, err = os.ReadFile(filepath.Join(dir, checkpoint.File)); err != nil {
		f.Fatal(err)
	}
	if journal, err = os.ReadFile(filepath.Join(dir, checkpoint.JournalFile)); err != nil {
		f.Fatal(err)
	}
	return cpFile, journal
}

// payloads returns the checkpoint's data and the journal's lines without their checksums.
func payloads(f *testing.F, cpFile, journal []byte) (data, lines []byte) {
	f.Helper()
	var cf struct{ Data json.RawMessage }
	if err := json.Unmarshal(cpFile, &cf); err != nil {
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
func checksummed(data, lines []byte) (cpFile, journal []byte) {
	cpFile = []byte(`{"version":"` + checkpoint.Version + `","checksum":"` + checksum(data) + `","data":`)
	cpFile = append(append(cpFile, data...), '}')
	for len(lines) > 0 {
		end := bytes.IndexByte(lines, '\n')
		if end < 0 {
			journal = append(journal, lines...)
			break
		}
		journal = append(journal, checksum(lines[:end])+" "...)
		journal = append(append(journal, lines[:end]...), '\n')
		lines = lines[end+1:]
	}
	return cpFile, journal
}

// FuzzCheckpointLoad loads any checkpoint and journal, as written (raw) or as a plugin
// would checksum them: the store either refuses them as checkpoint.ErrCorrupt (so that
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
	f.Fuzz(func(t *testing.T, raw bool, cpFile, journal []byte) {
		if !raw {
			if !json.Valid(cpFile) {
				return
			}
			cpFile, journal = checksummed(cpFile, journal)
		}
		dir := t.TempDir()
		for name, data := range map[string][]byte{checkpoint.File: cpFile, checkpoint.JournalFile: journal} {
			if data == nil {
				continue
			}
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		s := checkpoint.New(dir, nil, klog.Background())
		defer s.Close()
		d, err := s.Load()
		if err != nil {
			if !errors.Is(err, checkpoint.ErrCorrupt) {
				t.Fatalf("load: %v, not a checkpoint.ErrCorrupt", err)
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
		want := &checkpoint.Data{BootID: d.BootID, Generation: d.Generation + 1, Claims: d.Claims}
		if err := s.Compact(d); err != nil {
			t.Fatal(err)
		}
		again := checkpoint.New(dir, nil, klog.Background())
		defer again.Close()
		got, err := again.Load()
		if err != nil {
			t.Fatalf("loading the compacted cpFile: %v", err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("compacted and loaded again:\n%+v\nwant\n%+v", got, want)
		}
	})
}

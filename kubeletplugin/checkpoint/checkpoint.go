// Package checkpoint keeps the kubelet plugin's prepared claims on disk: a versioned,
// checksummed checkpoint file and a journal of the changes since, one checksummed line
// each. Its records (record.go) are the on-disk format, apart from the in-memory types
// of package prepared, and are converted to and from them.
package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/kubeletplugin/internal/hook"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// Version is the version of the checkpoint file format. v2 pairs the checkpoint
// with a journal (JournalFile); a v1 checkpoint (the whole state in one file, written by
// earlier plugins) is read and migrated: the next checkpoint written is v2.
const Version = "gpu.gpudra.dev/checkpoint/v2"

// versionV1 is the format of plugins before the journal.
const versionV1 = "gpu.gpudra.dev/checkpoint/v1"

// JournalVersion is the version of the journal's format.
const JournalVersion = "gpu.gpudra.dev/checkpoint-journal/v1"

// File and JournalFile are the checkpoint's names in the checkpoint directory.
const (
	File        = "checkpoint.json"
	JournalFile = "checkpoint.journal"
)

// PointCompacted is the hook point reached when a compaction has written the new
// checkpoint and not yet its journal.
const PointCompacted = "checkpoint-compacted"

// journalCompactBytes is the size past which the journal is folded into the checkpoint.
const journalCompactBytes = 1 << 20

// Data is the node's claims as of a checkpoint generation; the checkpoint
// file holds it as a checkpointRecord, which its checksum covers.
type Data struct {
	BootID string
	// Generation pairs the checkpoint with its journal: the journal's records apply to
	// the checkpoint of the same generation only. 0 in a v1 checkpoint.
	Generation uint64
	Claims     map[types.UID]*prepared.Claim
}

type fileRecord struct {
	Version  string          `json:"version"`
	Checksum string          `json:"checksum"`
	Data     json.RawMessage `json:"data"` // a checkpointRecord
}

// journalHeader is the journal's first record.
type journalHeader struct {
	Version    string `json:"version"`
	BootID     string `json:"bootID"`
	Generation uint64 `json:"generation"`
}

// journalRecord is one change to the checkpoint's claims: a claim's new record (a
// claimRecord), or the UID of a claim that is gone.
type journalRecord struct {
	Put    json.RawMessage `json:"put,omitempty"`
	Delete string          `json:"delete,omitempty"`
}

// ErrCorrupt is wrapped by Load for unreadable checkpoints.
var ErrCorrupt = errors.New("corrupt checkpoint")

func checksum(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// Store keeps the node's claims in two files: the checkpoint (File,
// the claims as of one generation) and its journal (JournalFile, the changes since, one
// checksummed line each, appended). A prepare or unprepare appends a line: it never
// rewrites or replaces a file, which on ext4 (auto_da_alloc) starts writeback of the
// whole file on the request path. When the journal has grown past compactBytes and the
// checkpoint file's size, the claims are written to a new checkpoint of the next
// generation (temporary file renamed over the old one), then a new journal for it
// replaces the old one.
//
// A killed plugin leaves an old or a new checkpoint, never a mix; a journal line it was
// writing is a torn last line (no newline), which loading drops and cuts off. A killed
// compaction leaves the new checkpoint with the old generation's journal, which loading
// ignores (the checkpoint holds all of it). Nothing is fsynced: page-cache writes survive
// a killed process, and after a power loss the boot id changes and the claims are
// dropped anyway. A line that is not the torn last one and does not check out is
// corruption (ErrCorrupt), like a bad checkpoint.
type Store struct {
	path, journalPath string
	// The journal is compacted when it is larger than compactBytes and the checkpoint
	// file (so that compactions write at most as much as the journal grew); after every
	// record with everyRecord (tests).
	compactBytes int64
	everyRecord  bool
	hook         hook.Hook
	logger       klog.Logger

	// journal is open for appending when it is the current generation's; nil when a
	// compaction must write one before the next append.
	journal *os.File
	// jinfo and size are the journal as this instance last read or wrote it; cpInfo is
	// the checkpoint file's. Another plugin instance (a rolling update) changes them.
	jinfo, cpInfo os.FileInfo
	size          int64
	// cpBytes is the size of the last checkpoint file written or read.
	cpBytes int64
}

// New is the store of the checkpoint in dir; h is called at its crash points (the
// ...Torn points its callers name, and PointCompacted).
func New(dir string, h hook.Hook, logger klog.Logger) *Store {
	return &Store{path: filepath.Join(dir, File), journalPath: filepath.Join(dir, JournalFile),
		compactBytes: journalCompactBytes, hook: h, logger: logger}
}

// Unchanged reports whether the files are as this instance last read or wrote them.
func (s *Store) Unchanged() bool {
	if s.journal == nil || s.jinfo == nil || s.cpInfo == nil {
		return false
	}
	j, err := os.Stat(s.journalPath)
	if err != nil || !os.SameFile(j, s.jinfo) || j.Size() != s.size {
		return false
	}
	c, err := os.Stat(s.path)
	return err == nil && os.SameFile(c, s.cpInfo) && c.ModTime().Equal(s.cpInfo.ModTime()) && c.Size() == s.cpInfo.Size()
}

// Load returns the claims (the checkpoint with its journal replayed), empty ones when
// there is no checkpoint, or an error wrapping ErrCorrupt. The journal is then
// open for appending, unless it is missing or belongs to another checkpoint: then the
// next append compacts first.
func (s *Store) Load() (*Data, error) {
	s.Close()
	s.cpInfo, s.cpBytes = nil, 0
	d, err := s.loadCheckpoint()
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(s.journalPath, os.O_RDWR|os.O_APPEND, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return d, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading checkpoint journal: %w", err)
	}
	current, err := s.replay(f, d)
	if err != nil {
		f.Close()
		return nil, err
	}
	if !current {
		f.Close()
		return d, nil
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("reading checkpoint journal: %w", err)
	}
	s.journal, s.jinfo, s.size = f, info, info.Size()
	return d, nil
}

func (s *Store) loadCheckpoint() (*Data, error) {
	raw, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return &Data{Claims: map[types.UID]*prepared.Claim{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading checkpoint: %w", err)
	}
	s.cpInfo, _ = os.Stat(s.path)
	s.cpBytes = int64(len(raw))
	var f fileRecord
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrCorrupt, s.path, err)
	}
	if f.Version != Version && f.Version != versionV1 {
		return nil, fmt.Errorf("%w %s: version %q, this plugin reads %q and %q", ErrCorrupt, s.path, f.Version, Version, versionV1)
	}
	if checksum(f.Data) != f.Checksum {
		return nil, fmt.Errorf("%w %s: checksum mismatch", ErrCorrupt, s.path)
	}
	var rec checkpointRecord
	if err := StrictDecode(f.Data, &rec); err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrCorrupt, s.path, err)
	}
	d := rec.data()
	if f.Version == versionV1 {
		d.Generation = 0 // a v1 checkpoint has no journal
	} else if d.Generation == 0 {
		return nil, fmt.Errorf("%w %s: generation 0", ErrCorrupt, s.path)
	}
	if d.Claims == nil {
		d.Claims = map[types.UID]*prepared.Claim{}
	}
	for uid, pc := range d.Claims {
		if pc == nil || pc.UID != uid {
			return nil, fmt.Errorf("%w %s: claims[%q] is not a record of claim %s", ErrCorrupt, s.path, uid, uid)
		}
	}
	return d, nil
}

// replay applies the journal's records to d and reports whether the journal is d's
// (same generation and boot). A torn last line is cut off.
func (s *Store) replay(f *os.File, d *Data) (current bool, err error) {
	raw, err := io.ReadAll(f)
	if err != nil {
		return false, fmt.Errorf("reading checkpoint journal: %w", err)
	}
	corrupt := func(line int, why string) error {
		return fmt.Errorf("%w %s: line %d: %s", ErrCorrupt, s.journalPath, line, why)
	}
	if bytes.IndexByte(raw, '\n') < 0 {
		return false, nil // no header: a journal killed while being created
	}
	rest, valid := raw, 0
	for line := 1; len(rest) > 0; line++ {
		end := bytes.IndexByte(rest, '\n')
		if end < 0 { // a torn last line: the write a killed plugin did not finish
			if err := f.Truncate(int64(valid)); err != nil {
				return false, fmt.Errorf("cutting off the torn end of the checkpoint journal: %w", err)
			}
			break
		}
		payload, ok := checkLine(rest[:end])
		if !ok {
			return false, corrupt(line, "checksum mismatch")
		}
		if line == 1 {
			var h journalHeader
			if err := StrictDecode(payload, &h); err != nil || h.Version != JournalVersion {
				return false, corrupt(line, fmt.Sprintf("not a %s header", JournalVersion))
			}
			if h.Generation != d.Generation || h.BootID != d.BootID || d.Generation == 0 {
				return false, nil // a killed compaction's old journal: the checkpoint holds it all
			}
		} else {
			var r journalRecord
			if err := StrictDecode(payload, &r); err != nil {
				return false, corrupt(line, err.Error())
			}
			switch {
			case r.Put != nil:
				pc, err := UnmarshalClaim(r.Put, true)
				if err != nil || pc.UID == "" {
					return false, corrupt(line, fmt.Sprintf("claim record: %v", err))
				}
				d.Claims[pc.UID] = pc
			case r.Delete != "":
				delete(d.Claims, types.UID(r.Delete))
			default:
				return false, corrupt(line, "empty record")
			}
		}
		valid += end + 1
		rest = rest[end+1:]
	}
	return true, nil
}

// checkLine splits "<sha256 hex> <payload>" and checks the payload's checksum.
func checkLine(line []byte) ([]byte, bool) {
	const n = sha256.Size * 2
	if len(line) < n+1 || line[n] != ' ' {
		return nil, false
	}
	payload := line[n+1:]
	return payload, checksum(payload) == string(line[:n])
}

// StrictDecode decodes JSON into v, refusing fields v does not have.
func StrictDecode(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// line is payload as a journal line.
func line(payload []byte) []byte {
	out := make([]byte, 0, sha256.Size*2+len(payload)+2)
	out = append(out, checksum(payload)...)
	out = append(out, ' ')
	out = append(out, payload...)
	return append(out, '\n')
}

// Put records the claim as it is now; torn is the hook point reached with half the line
// written.
func (s *Store) Put(d *Data, pc *prepared.Claim, torn string) error {
	rec, err := MarshalClaim(pc)
	if err != nil {
		return err
	}
	return s.PutRecord(d, rec, torn)
}

// PutRecord records a claim already marshaled (rec is a claimRecord as JSON).
func (s *Store) PutRecord(d *Data, rec []byte, torn string) error {
	payload := make([]byte, 0, len(rec)+8)
	payload = append(payload, `{"put":`...)
	payload = append(payload, rec...)
	payload = append(payload, '}')
	return s.append(d, payload, torn)
}

// Remove records that the claim is gone.
func (s *Store) Remove(d *Data, uid types.UID, torn string) error {
	payload, err := json.Marshal(journalRecord{Delete: string(uid)})
	if err != nil {
		return err
	}
	return s.append(d, payload, torn)
}

// append writes a record line to the journal; d is the claims with the change applied,
// which a compaction (first when there is no current journal, after when it has grown
// past compactBytes) writes to the checkpoint.
func (s *Store) append(d *Data, payload []byte, torn string) error {
	if s.journal == nil {
		return s.Compact(d) // the new checkpoint has the change
	}
	l := line(payload)
	var err error
	if s.hook == nil {
		_, err = s.journal.Write(l)
	} else { // a test may kill the plugin with the line half written
		if _, err = s.journal.Write(l[:len(l)/2]); err == nil {
			s.size += int64(len(l) / 2)
			if err = s.hook.At(torn); err == nil {
				_, err = s.journal.Write(l[len(l)/2:])
			}
			s.size -= int64(len(l) / 2)
		}
	}
	if err != nil {
		// The line may be in part in the file: the journal is read again before the
		// next change (unchanged reports false), which cuts a torn line off.
		s.Close()
		return fmt.Errorf("writing checkpoint journal: %w", err)
	}
	s.size += int64(len(l))
	if s.everyRecord || (s.size > s.compactBytes && s.size > s.cpBytes) {
		// The change is recorded whatever happens here: in the journal, and in the new
		// checkpoint once that is in place. A failed compaction is tried again after the
		// next record.
		if err := s.Compact(d); err != nil {
			s.logger.Error(err, "Compacting the checkpoint journal failed")
		}
	}
	return nil
}

// Compact writes d as the checkpoint of the next generation, then a new journal for it.
func (s *Store) Compact(d *Data) error {
	next := *d
	next.Generation = d.Generation + 1
	data, err := json.Marshal(checkpointRecordOf(&next))
	if err != nil {
		return err
	}
	// The file is fileRecord as JSON. data is compact JSON already: spliced in, not
	// marshaled again (json.Marshal would validate and compact all of it a second time).
	raw := make([]byte, 0, len(data)+len(Version)+128)
	raw = append(raw, `{"version":"`+Version+`","checksum":"`...)
	raw = append(raw, checksum(data)...)
	raw = append(raw, `","data":`...)
	raw = append(raw, data...)
	raw = append(raw, '}')
	if err := WriteRenamed(s.path, raw); err != nil {
		return fmt.Errorf("writing checkpoint: %w", err)
	}
	// The checkpoint is next's whatever happens to the journal: appending to the old
	// one would write records that loading ignores.
	d.Generation = next.Generation
	s.Close()
	s.cpInfo, _ = os.Stat(s.path)
	s.cpBytes = int64(len(raw))
	if err := s.hook.At(PointCompacted); err != nil {
		return err
	}
	header, err := json.Marshal(journalHeader{Version: JournalVersion, BootID: d.BootID, Generation: d.Generation})
	if err != nil {
		return err
	}
	l := line(header)
	if err := WriteRenamed(s.journalPath, l); err != nil {
		return fmt.Errorf("writing checkpoint journal: %w", err)
	}
	f, err := os.OpenFile(s.journalPath, os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("opening checkpoint journal: %w", err)
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("opening checkpoint journal: %w", err)
	}
	s.journal, s.jinfo, s.size = f, info, int64(len(l))
	return nil
}

// WriteRenamed writes raw to a temporary file renamed to path.
func WriteRenamed(path string, raw []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*.tmp")
	if err != nil {
		return err
	}
	_, err = tmp.Write(raw)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}

// CompactEveryRecord makes the store fold the journal into a new checkpoint after every
// record it appends (tests).
func (s *Store) CompactEveryRecord() { s.everyRecord = true }

// Close closes the journal; the next change reads the files again.
func (s *Store) Close() {
	if s.journal != nil {
		_ = s.journal.Close()
	}
	s.journal, s.jinfo, s.size = nil, nil, 0
}

// SetAside renames a corrupt checkpoint and its journal so that they can be inspected,
// and returns the checkpoint's new name.
func (s *Store) SetAside(now time.Time) (string, error) {
	s.Close()
	suffix := ".corrupt-" + now.UTC().Format("20060102T150405.000000000")
	aside := s.path + suffix
	if err := os.Rename(s.path, aside); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if err := os.Rename(s.journalPath, s.journalPath+suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	return aside, nil
}

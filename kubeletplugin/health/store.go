package health

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/kubeletplugin/checkpoint"
)

// File is the file, in the checkpoint directory, that holds the node's unhealthy
// GPUs and their taints. It is the one source of the taints for every plugin instance on
// the node (two during a rolling update) and outlives their restarts.
const File = "health.json"

// Version is the version of File's format.
const Version = "gpu.gpudra.dev/health/v1"

// healthFile is what File holds.
type healthFile struct {
	Version string      `json:"version"`
	GPUs    []Unhealthy `json:"gpus"`
}

// Unhealthy is one unhealthy GPU, as File holds it.
type Unhealthy struct {
	// Index is the GPU's NVML index; UUID its UUID.
	Index int    `json:"index"`
	UUID  string `json:"uuid,omitempty"`
	// BootID is the node's boot id when the GPU became unhealthy.
	BootID string `json:"bootID"`
	Taint  Taint  `json:"taint"`
}

// Taint is the taint an unhealthy GPU's devices carry, as File holds it.
type Taint struct {
	Key    string    `json:"key"`
	Value  string    `json:"value"`
	Effect string    `json:"effect"`
	Added  time.Time `json:"added"`
}

func fileTaint(t resourceapi.DeviceTaint) Taint {
	out := Taint{Key: t.Key, Value: t.Value, Effect: string(t.Effect)}
	if t.TimeAdded != nil {
		out.Added = t.TimeAdded.UTC()
	}
	return out
}

// Device is the taint as its devices are published.
func (t Taint) Device() resourceapi.DeviceTaint {
	out := resourceapi.DeviceTaint{Key: t.Key, Value: t.Value, Effect: resourceapi.DeviceTaintEffect(t.Effect)}
	if !t.Added.IsZero() {
		out.TimeAdded = &metav1.Time{Time: t.Added}
	}
	return out
}

// healthStore reads and writes File. Writes replace the file (a temporary file
// renamed over it) under a lock of its own, health.lock, so that two plugin instances
// never lose each other's records; a reader sees the old file or the new one.
type healthStore struct {
	path, lockPath string
	logger         klog.Logger
	// seen is the file as this instance last read or wrote it; nil when there was none.
	seen os.FileInfo
}

func newHealthStore(dir string, logger klog.Logger) *healthStore {
	return &healthStore{path: filepath.Join(dir, File), lockPath: filepath.Join(dir, "health.lock"), logger: logger}
}

// changed reports whether the file is not as this instance last read or wrote it
// (another instance wrote it).
func (s *healthStore) changed() bool {
	info, err := os.Stat(s.path)
	if err != nil {
		return s.seen != nil
	}
	return s.seen == nil || !os.SameFile(info, s.seen) || !info.ModTime().Equal(s.seen.ModTime()) || info.Size() != s.seen.Size()
}

// read returns the records by GPU index.
func (s *healthStore) read() (map[int]Unhealthy, error) {
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	return s.readLocked()
}

// update lets change edit the records (by GPU index) and writes them when it reports a
// change. It returns the records as the file now holds them.
func (s *healthStore) update(change func(map[int]Unhealthy) bool) (map[int]Unhealthy, error) {
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	recs, err := s.readLocked()
	if err != nil {
		return nil, err
	}
	if !change(recs) {
		return recs, nil
	}
	f := healthFile{Version: Version, GPUs: []Unhealthy{}}
	for _, gpu := range slices.Sorted(maps.Keys(recs)) {
		f.GPUs = append(f.GPUs, recs[gpu])
	}
	raw, err := json.MarshalIndent(&f, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := checkpoint.WriteRenamed(s.path, append(raw, '\n')); err != nil {
		return nil, fmt.Errorf("writing %s: %w", s.path, err)
	}
	s.seen, _ = os.Stat(s.path)
	return recs, nil
}

// readLocked reads the file. One that cannot be decoded (edited by hand, another
// version) is set aside, logged, and read as no record: the plugin goes on serving.
func (s *healthStore) readLocked() (map[int]Unhealthy, error) {
	recs := map[int]Unhealthy{}
	raw, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		s.seen = nil
		return recs, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", s.path, err)
	}
	s.seen, _ = os.Stat(s.path)
	var f healthFile
	err = checkpoint.StrictDecode(raw, &f)
	if err == nil && f.Version != Version {
		err = fmt.Errorf("version %q, this plugin reads %q", f.Version, Version)
	}
	for k := 0; err == nil && k < len(f.GPUs); k++ {
		r := f.GPUs[k]
		switch {
		case r.Index < 0:
			err = fmt.Errorf("gpus[%d].index: %d is not a GPU index", k, r.Index)
		case r.Taint.Key == "" || r.Taint.Value == "" || (r.Taint.Effect != string(resourceapi.DeviceTaintEffectNoSchedule) && r.Taint.Effect != string(resourceapi.DeviceTaintEffectNoExecute)):
			err = fmt.Errorf("gpus[%d].taint: %+v, want a key, a value and effect %s or %s", k, r.Taint, resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNoExecute)
		default:
			recs[r.Index] = r
		}
	}
	if err == nil {
		return recs, nil
	}
	aside := s.path + ".corrupt-" + time.Now().UTC().Format("20060102T150405.000000000")
	if rerr := os.Rename(s.path, aside); rerr != nil {
		return nil, fmt.Errorf("%s is corrupt (%v) and cannot be set aside: %w", s.path, err, rerr)
	}
	s.seen = nil
	s.logger.Error(err, "GPU health file is corrupt: set aside, the GPUs it tainted are published untainted", "file", s.path, "setAside", aside)
	return map[int]Unhealthy{}, nil
}

func (s *healthStore) lock() (func(), error) {
	f, err := os.OpenFile(s.lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("GPU health lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("GPU health lock %s: %w", s.lockPath, err)
	}
	return func() {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, nil
}

// Cleared is a GPU that a plugin's start found healthy again, and why.
type Cleared struct {
	Unhealthy
	Why string
}

// Open reads File at a plugin's start and clears the taints of the GPUs
// that NVML shows healthy again (healthyAgain), so that every other unhealthy GPU stays
// tainted across restarts.
func Open(dir, bootID string, inv *driver.Inventory, logger klog.Logger) (*GPUs, error) {
	h := &GPUs{store: newHealthStore(dir, logger), bootID: bootID, uuids: map[int]string{},
		unsaved: map[int]Unhealthy{}, changed: make(chan struct{})}
	for _, g := range inv.GPUs {
		h.uuids[g.Index] = g.UUID
	}
	recs, err := h.store.update(func(recs map[int]Unhealthy) bool {
		for _, gpu := range slices.Sorted(maps.Keys(recs)) {
			r := recs[gpu]
			if why := healthyAgain(r, inv, bootID); why != "" {
				h.cleared = append(h.cleared, Cleared{r, why})
				delete(recs, gpu)
			}
		}
		return len(h.cleared) > 0
	})
	if err != nil {
		return nil, fmt.Errorf("GPU health: %w", err)
	}
	h.recs = recs
	for _, c := range h.cleared {
		logger.Info("GPU is healthy again: its devices are published untainted", "gpu", c.Index, "uuid", c.UUID, "taint", TaintString(c.Taint.Device()), "why", c.Why)
	}
	for _, gpu := range slices.Sorted(maps.Keys(recs)) {
		r := recs[gpu]
		logger.Info("GPU is unhealthy since before this plugin started: its devices stay tainted", "gpu", gpu, "uuid", r.UUID, "taint", TaintString(r.Taint.Device()), "since", r.Taint.Added)
	}
	return h, nil
}

// healthyAgain says why an unhealthy GPU's record is cleared when a plugin starts and
// discovery has read the node's GPUs, "" when it is kept. NVML has no event saying that
// a GPU is healthy again; discovery shows it:
//
//   - a GPU tainted gpu-lost that NVML reads in full is healthy: NVML's lost-GPU event
//     names no GPU, so every GPU NVML still read got that taint; discovery tells the
//     lost one (which it cannot read) from the others;
//   - a GPU with any other fault that NVML reads in full is healthy once the node has
//     rebooted since the fault (a new boot id): a reboot resets the GPU;
//   - a record of an earlier boot whose GPU is neither discovered nor unreadable is of a
//     GPU that left the node.
//
// Records are matched to GPUs by UUID. A simulated backend is read the same way: its
// GPUs are read in full unless a test makes their NVML calls fail, and a reboot is a new
// boot id. To return a GPU to service without a reboot (after a GPU reset), remove
// the health file (File) and restart the plugin.
func healthyAgain(r Unhealthy, inv *driver.Inventory, bootID string) string {
	read := slices.ContainsFunc(inv.GPUs, func(g driver.GPU) bool {
		return r.UUID != "" && g.UUID == r.UUID || r.UUID == "" && g.Index == r.Index
	})
	rebooted := r.BootID != bootID
	switch {
	case read && r.Taint.Value == lostTaintValue:
		return "NVML reads the GPU in full: it is not the one NVML reported lost"
	case read && rebooted:
		return "the node rebooted since the fault and NVML reads the GPU in full"
	case !read && rebooted && !slices.ContainsFunc(inv.Unreadable, func(u driver.UnreadableGPU) bool { return u.Index == r.Index }):
		return "the GPU is no longer on the node"
	}
	return ""
}

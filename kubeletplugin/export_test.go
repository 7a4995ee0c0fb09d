package kubeletplugin

import (
	"maps"
	"slices"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/kubeletplugin/checkpoint"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// CompactJournalAfterEachRecord makes d fold the checkpoint journal into a new
// checkpoint after every record it appends.
func CompactJournalAfterEachRecord(d *Driver) {
	d.state.mu.Lock()
	defer d.state.mu.Unlock()
	d.state.store.CompactEveryRecord()
}

// ReadCheckpoint returns the claims that the checkpoint in dir, with its journal, holds,
// their states, and the checkpoint's generation (how many times it was written).
func ReadCheckpoint(dir string) (map[types.UID]prepared.State, uint64, error) {
	s := checkpoint.New(dir, nil, klog.Background())
	defer s.Close()
	d, err := s.Load()
	if err != nil {
		return nil, 0, err
	}
	out := make(map[types.UID]prepared.State, len(d.Claims))
	for uid, pc := range d.Claims {
		out[uid] = pc.State
	}
	return out, d.Generation, nil
}

// MountShmWith makes d mount the claims' MPS shm tmpfs with mount instead of the
// mount(2) of a tmpfs: a mount that fails with EPERM is a plugin without the privilege.
func MountShmWith(d *Driver, mount func(dir string) error) {
	d.state.mu.Lock()
	defer d.state.mu.Unlock()
	d.state.mps.mountShm = mount
}

// SpareMPSDirs is how many spare MPS directory trees (each with its shm tmpfs where the
// plugin may mount) a plugin keeps ready.
const SpareMPSDirs = spareMPSDirs

// RemakeSpareMPSDirs replaces d's spare MPS trees with new ones (made with d's current
// mount function).
func RemakeSpareMPSDirs(d *Driver) error {
	d.state.mu.Lock()
	defer d.state.mu.Unlock()
	return d.state.mps.resetSpares()
}

// ShmMounts is a table of stubbed MPS shm tmpfs mounts (StubShmMounts).
type ShmMounts struct {
	mu      sync.Mutex
	mounted map[string]bool
}

// Mounted are the directories mounted now, sorted.
func (m *ShmMounts) Mounted() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.mounted))
}

// StubShmMounts makes plugins made until t ends mount and unmount their MPS shm tmpfs in
// the table it returns instead of with mount(2).
func StubShmMounts(t testing.TB) *ShmMounts {
	saved := shmMounts
	t.Cleanup(func() { shmMounts = saved })
	table := &ShmMounts{mounted: map[string]bool{}}
	shmMounts.mount = func(dir string) error {
		table.mu.Lock()
		defer table.mu.Unlock()
		table.mounted[dir] = true
		return nil
	}
	shmMounts.unmount = func(dir string) error {
		table.mu.Lock()
		defer table.mu.Unlock()
		delete(table.mounted, dir)
		return nil
	}
	return table
}

// Forget empties the table: the mounts went with their mount namespace (a plugin's
// container that ended).
func (m *ShmMounts) Forget() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.mounted)
}

// GPULocks is how many GPUs' time-slice locks d keeps now (held or waited for).
func GPULocks(d *Driver) int {
	l := &d.state.gpuLocks
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held)
}

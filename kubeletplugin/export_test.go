package kubeletplugin

import (
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// CompactJournalAfterEachRecord makes d fold the checkpoint journal into a new
// checkpoint after every record it appends.
func CompactJournalAfterEachRecord(d *Driver) {
	d.state.mu.Lock()
	defer d.state.mu.Unlock()
	d.state.store.everyRecord = true
}

// ReadCheckpoint returns the claims that the checkpoint in dir, with its journal, holds,
// their states, and the checkpoint's generation (how many times it was written).
func ReadCheckpoint(dir string) (map[types.UID]ClaimState, uint64, error) {
	s := newCheckpointStore(dir, nil, klog.Background())
	defer s.closeJournal()
	d, err := s.load()
	if err != nil {
		return nil, 0, err
	}
	out := make(map[types.UID]ClaimState, len(d.Claims))
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

package kubeletplugin

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/kubeletplugin/mps"
)

// spareMPSDirs is how many empty MPS directory trees (<checkpoint dir>/mps/.spare-*/
// {pipe,log,shm}) the plugin keeps ready, so that preparing a claim under MPS renames one
// into place instead of creating three directories while the kubelet waits (on ext4 a
// directory costs about as much as writing the claim's CDI spec). Start-up creates them;
// an unprepare creates those that prepares took. A spare is always new: directories of
// an unprepared claim are removed, never reused by another claim.
const spareMPSDirs = 4

const sparePrefix = ".spare-"

func isSpare(name string) bool { return strings.HasPrefix(name, sparePrefix) }

// takeSpare renames a spare tree to the claim's MPS directory and reports whether it
// did (false: no spare, or the directory exists).
func (m *mpsManager) takeSpare(uid types.UID) bool {
	for len(m.spares) > 0 {
		spare := m.spares[len(m.spares)-1]
		err := os.Rename(spare, m.claimDir(uid))
		if err == nil {
			m.spares = m.spares[:len(m.spares)-1]
			return true
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return false // the claim's directory exists: the spare stays
		}
		// Gone: another plugin instance starting up (a rolling update) removed it.
		m.spares = m.spares[:len(m.spares)-1]
	}
	return false
}

// makeSpares creates spare trees until there are spareMPSDirs, with the modes of a
// claim's MPS directories (mps.TreeMode...) and the shm tmpfs mounted (makeShmDir), so that
// a prepare neither makes directories nor mounts: the mount moves with the tree when it is
// renamed into place (a mount follows its directory, in every mount namespace it
// propagated to). Mounting at prepare cost a share under MPS ~170 µs (p50 490 against 320
// without a shm directory, BenchmarkPrepareVsFloor back to back).
func (m *mpsManager) makeSpares() error {
	if err := os.MkdirAll(m.root, mps.TreeMode); err != nil {
		return err
	}
	if err := mps.MkdirMode(m.root, mps.TreeMode); err != nil {
		return err
	}
	for len(m.spares) < spareMPSDirs {
		dir, err := os.MkdirTemp(m.root, sparePrefix+"*")
		if err != nil {
			return err
		}
		if err := os.Chmod(dir, mps.TreeMode); err != nil {
			return err
		}
		for _, sub := range []struct {
			name string
			mode fs.FileMode
		}{{"pipe", mps.PipeMode}, {"log", mps.LogMode}} {
			if err := mps.MkdirMode(filepath.Join(dir, sub.name), sub.mode); err != nil {
				return err
			}
		}
		if _, err := m.makeShmDir(filepath.Join(dir, "shm")); err != nil {
			return err
		}
		m.spares = append(m.spares, dir)
	}
	return nil
}

// resetSpares removes the spares on disk (an earlier plugin's, or one that a killed
// plugin left half made) and creates new ones.
func (m *mpsManager) resetSpares() error {
	entries, err := os.ReadDir(m.root)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	var errs []error
	for _, e := range entries {
		if isSpare(e.Name()) {
			errs = append(errs, m.removeSpareTree(filepath.Join(m.root, e.Name())))
		}
	}
	m.spares = nil
	return errors.Join(append(errs, m.makeSpares())...)
}

// removeSpares unmounts and removes this plugin's spare trees, when it stops: a plugin
// that is uninstalled leaves no tmpfs mounted, and in a rolling update the new plugin
// has made its own.
func (m *mpsManager) removeSpares() {
	for _, spare := range m.spares {
		if err := m.removeSpareTree(spare); err != nil {
			m.logger.Error(err, "Removing a spare MPS directory tree", "dir", spare)
		}
	}
	m.spares = nil
}

// removeSpareTree unmounts a spare tree's shm tmpfs and removes the tree; with the tmpfs
// still mounted (the unmount failed) the tree stays.
func (m *mpsManager) removeSpareTree(dir string) error {
	if err := m.unmountShm(filepath.Join(dir, "shm")); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// recordStartMounts begins recording the shm tmpfs this manager mounts while the plugin
// starts: its spares, and the shm directories of the prepared claims it restores.
func (m *mpsManager) recordStartMounts() { m.startMounts = new([]string) }

// stopRecording ends recordStartMounts and returns what was mounted since.
func (m *mpsManager) stopRecording() []string {
	var out []string
	if m.startMounts != nil {
		out = *m.startMounts
	}
	m.startMounts = nil
	return out
}

// undoStartMounts unmounts the shm tmpfs a start that failed mounted (stopRecording), last
// first, and removes the spare trees, so that the failed start leaves no tmpfs behind. A
// spare that a prepare took meanwhile is a claim's, under another path, and stays.
func (m *mpsManager) undoStartMounts(mounted []string) error {
	var errs []error
	for _, dir := range slices.Backward(mounted) {
		if err := m.unmountShm(dir); err != nil {
			errs = append(errs, err)
		}
	}
	m.removeSpares()
	return errors.Join(errs...)
}

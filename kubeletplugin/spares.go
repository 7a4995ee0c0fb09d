package kubeletplugin

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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

// takeSpareMPSDir renames a spare tree to the claim's MPS directory and reports whether
// it did (false: no spare, or the directory exists).
func (s *state) takeSpareMPSDir(uid string) bool {
	for len(s.spares) > 0 {
		spare := s.spares[len(s.spares)-1]
		err := os.Rename(spare, s.planner.mpsDir(uid))
		if err == nil {
			s.spares = s.spares[:len(s.spares)-1]
			return true
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return false // the claim's directory exists: the spare stays
		}
		// Gone: another plugin instance starting up (a rolling update) removed it.
		s.spares = s.spares[:len(s.spares)-1]
	}
	return false
}

// makeSpareMPSDirs creates spare trees until there are spareMPSDirs, with the modes of a
// claim's MPS directories (mpsTreeMode...). A claim's shm tmpfs is mounted once its tree
// is in place.
func (s *state) makeSpareMPSDirs() error {
	root := filepath.Join(s.planner.stateDir, "mps")
	if err := os.MkdirAll(root, mpsTreeMode); err != nil {
		return err
	}
	if err := mkdirMode(root, mpsTreeMode); err != nil {
		return err
	}
	for len(s.spares) < spareMPSDirs {
		dir, err := os.MkdirTemp(root, sparePrefix+"*")
		if err != nil {
			return err
		}
		if err := os.Chmod(dir, mpsTreeMode); err != nil {
			return err
		}
		for _, sub := range []struct {
			name string
			mode fs.FileMode
		}{{"pipe", mpsPipeMode}, {"log", mpsLogMode}, {"shm", mpsShmMode}} {
			if err := mkdirMode(filepath.Join(dir, sub.name), sub.mode); err != nil {
				return err
			}
		}
		s.spares = append(s.spares, dir)
	}
	return nil
}

// resetSpareMPSDirs removes the spares on disk (an earlier plugin's, or one that a
// killed plugin left half made) and creates new ones.
func (s *state) resetSpareMPSDirs() error {
	root := filepath.Join(s.planner.stateDir, "mps")
	entries, err := os.ReadDir(root)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	var errs []error
	for _, e := range entries {
		if isSpare(e.Name()) {
			errs = append(errs, os.RemoveAll(filepath.Join(root, e.Name())))
		}
	}
	s.spares = nil
	return errors.Join(append(errs, s.makeSpareMPSDirs())...)
}

package kubeletplugin

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// preloadMode lets every user of a container read its /etc/ld.so.preload: the dynamic
// loader reads it as the process's user.
const preloadMode = 0o644

// makeVGPUFiles makes the HAMi-core cache directories and preload files of the claim's
// shares under HAMi-core; a preload file that exists with other content (a write a crash
// cut short) is written again. The preload file is written beside and renamed, so a
// container never sees half of it.
func makeVGPUFiles(pc *prepared.Claim) error {
	for _, d := range pc.Devices {
		if dir := d.CDI.CacheDir; dir != "" {
			if err := os.MkdirAll(dir, 0o750); err != nil {
				return fmt.Errorf("creating %s: %w", dir, err)
			}
		}
		if f := d.CDI.PreloadFile; f != "" {
			if err := writePreload(f); err != nil {
				return fmt.Errorf("claim %s/%s: HAMi-core preload file: %w", pc.Namespace, pc.Name, err)
			}
		}
	}
	return nil
}

func writePreload(path string) error {
	if got, err := os.ReadFile(path); err == nil && bytes.Equal(got, []byte(cdi.VGPUPreload)) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(cdi.VGPUPreload), preloadMode); err != nil {
		return err
	}
	// WriteFile's mode is masked by the umask.
	if err := os.Chmod(tmp, preloadMode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// removeVGPUFiles removes the claim's HAMi-core cache directory and preload file.
func (s *state) removeVGPUFiles(uid types.UID) {
	for _, path := range []string{s.planner.cacheDir(string(uid)), s.planner.preloadFile(string(uid)), s.planner.preloadFile(string(uid)) + ".tmp"} {
		if err := os.RemoveAll(path); err != nil {
			s.logger.Error(err, "Removing a claim's HAMi-core file", "claimUID", uid, "path", path)
		}
	}
}

// removeUnknownVGPU removes the HAMi-core cache directories and preload files of claims
// the checkpoint does not know: a plugin that died between making them and recording the
// claim, or between forgetting the claim and removing them.
func (s *state) removeUnknownVGPU() error {
	var errs []error
	for _, dir := range []string{vgpuDirName, preloadDirName} {
		entries, err := os.ReadDir(filepath.Join(s.planner.stateDir, dir))
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range entries {
			path := filepath.Join(s.planner.stateDir, dir, e.Name())
			uid := types.UID(e.Name())
			if dir == preloadDirName {
				uid = types.UID(strings.TrimSuffix(e.Name(), ".tmp"))
			}
			if s.cp.Claims[uid] != nil {
				continue
			}
			s.logger.Info("Removing a HAMi-core file no prepared claim accounts for", "path", path)
			errs = append(errs, os.RemoveAll(path))
		}
	}
	return errors.Join(errs...)
}

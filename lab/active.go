package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// CacheDir is gpudra's machine-wide cache ($GPUDRA_CACHE, default ~/.cache/gpudra): the
// toolchain and the record of the running lab live there.
func CacheDir() string {
	if d := os.Getenv("GPUDRA_CACHE"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "gpudra-cache")
	}
	return filepath.Join(home, ".cache", "gpudra")
}

// activeRecord is $GPUDRA_CACHE/lab-active: which lab runs on this machine. Only one lab may
// run at a time (they would compete for the machine and confuse each other's users).
type activeRecord struct {
	Dir       string    `json:"dir"`
	StartedAt time.Time `json:"startedAt"`
	// UpPID is the process running `up`; while it lives, the lab counts as running even
	// before its first component started.
	UpPID     int    `json:"upPID"`
	UpCmdline string `json:"upCmdline"`
}

func activePath() string { return filepath.Join(CacheDir(), "lab-active") }

// withActiveLock runs fn holding an exclusive lock on the machine-wide record.
func withActiveLock(fn func() error) error {
	if err := os.MkdirAll(CacheDir(), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(activePath()+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN) //nolint:errcheck
	return fn()
}

func readActive() (*activeRecord, error) {
	data, err := os.ReadFile(activePath())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r activeRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, nil // a torn or foreign file is treated as no record
	}
	return &r, nil
}

// alive reports whether the recorded lab still has a process: its `up` or any component.
func (r *activeRecord) alive() bool {
	if r.UpPID > 0 {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(r.UpPID) + "/cmdline"); err == nil && string(b) == r.UpCmdline {
			return true
		}
	}
	s, err := ReadState(r.Dir)
	if err != nil {
		return false
	}
	for _, c := range s.Components {
		if alive(c) {
			return true
		}
	}
	return false
}

// RunningLabError refuses a second lab.
type RunningLabError struct{ Dir string }

func (e *RunningLabError) Error() string {
	return fmt.Sprintf("a gpudra lab is already running in %s on this machine; use it (export KUBECONFIG=%s) or stop it first with `gpudra lab down --dir %s`",
		e.Dir, Layout{e.Dir}.Kubeconfig(), e.Dir)
}

// claimActive records dir as the machine's running lab, or refuses if another lab (or this
// one) is still running.
func claimActive(dir string) error {
	return withActiveLock(func() error {
		r, err := readActive()
		if err != nil {
			return err
		}
		if r != nil && r.alive() {
			return &RunningLabError{Dir: r.Dir}
		}
		self, _ := os.ReadFile("/proc/self/cmdline")
		data, _ := json.Marshal(activeRecord{Dir: dir, StartedAt: time.Now(), UpPID: os.Getpid(), UpCmdline: string(self)})
		return os.WriteFile(activePath(), data, 0o644)
	})
}

// releaseActive removes the record if it names dir.
func releaseActive(dir string) error {
	return withActiveLock(func() error {
		r, err := readActive()
		if err != nil || r == nil || r.Dir != dir {
			return err
		}
		return os.Remove(activePath())
	})
}

// ActiveDir returns the folder of the lab recorded as running on this machine, if any.
func ActiveDir() string {
	r, _ := readActive()
	if r == nil || !r.alive() {
		return ""
	}
	return r.Dir
}

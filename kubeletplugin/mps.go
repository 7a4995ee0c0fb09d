package kubeletplugin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// MPSDaemon is one claim's MPS control daemon: where it listens, the devices it serves
// and the limits it gives its clients by default.
type MPSDaemon struct {
	// PipeDir and LogDir are its CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY
	// (host paths; the claim's containers mount them).
	PipeDir string `json:"pipeDir"`
	LogDir  string `json:"logDir"`
	// Devices is its CUDA_VISIBLE_DEVICES: the UUIDs of the claim's GPUs or MIG devices
	// that run under MPS, in the claim's order.
	Devices []string `json:"devices"`
	// ActiveThreadPercent is set with set_default_active_thread_percentage; 0: no cap.
	ActiveThreadPercent int `json:"activeThreadPercent,omitempty"`
	// PinnedMemoryMiB is set with set_default_device_pinned_mem_limit for each device,
	// by its position in Devices; 0: no cap.
	PinnedMemoryMiB []int64 `json:"pinnedMemoryMiB,omitempty"`
	// PID is the daemon's process id when it was started (for people reading the
	// checkpoint; the plugin finds a daemon by its pipe directory).
	PID int `json:"pid,omitempty"`
}

// MPSControl starts and stops MPS control daemons. A daemon is found by its pipe
// directory, never by a remembered process id, so that a plugin that died between
// starting a daemon and recording it still finds the daemon.
type MPSControl interface {
	// Start starts the daemon, waits until it answers and applies its limits. It
	// returns the daemon's process id (0 when there is no process, as with a double).
	Start(d MPSDaemon) (pid int, err error)
	// Stop asks the daemon listening in pipeDir to quit and waits until it has; no
	// daemon there is no error.
	Stop(pipeDir string) error
	// Running reports whether a daemon listens in pipeDir.
	Running(pipeDir string) (bool, error)
}

// mpsPipeDir and mpsLogDir are the claim's MPS directories (as planned in cdi.MPS).
func (p *planner) mpsPipeDir(claimUID string) string {
	return filepath.Join(p.mpsDir(claimUID), "pipe")
}

func (p *planner) mpsLogDir(claimUID string) string {
	return filepath.Join(p.mpsDir(claimUID), "log")
}

// mpsDaemon is the daemon the claim needs, nil when none of its devices runs under MPS.
// MIG devices must have been created (their UUIDs are known only then).
func mpsDaemon(pc *PreparedClaim) *MPSDaemon {
	var d *MPSDaemon
	for _, dev := range pc.Devices {
		m := dev.CDI.MPS
		if m == nil {
			continue
		}
		if d == nil {
			d = &MPSDaemon{PipeDir: m.PipeDir, LogDir: m.LogDir}
		}
		var uuids []string
		if mig := dev.CDI.MIG; mig != nil {
			uuids = []string{mig.UUID}
		} else {
			for _, g := range dev.CDI.GPUs {
				uuids = append(uuids, g.UUID)
			}
		}
		for _, u := range uuids {
			d.Devices = append(d.Devices, u)
			d.PinnedMemoryMiB = append(d.PinnedMemoryMiB, m.PinnedMemoryMiB)
		}
		// One default for the whole daemon: the tightest cap any device asks for.
		if t := m.ActiveThreadPercent; t > 0 && (d.ActiveThreadPercent == 0 || t < d.ActiveThreadPercent) {
			d.ActiveThreadPercent = t
		}
	}
	if d != nil && !hasLimit(d.PinnedMemoryMiB) {
		d.PinnedMemoryMiB = nil
	}
	return d
}

func hasLimit(mibs []int64) bool {
	for _, m := range mibs {
		if m > 0 {
			return true
		}
	}
	return false
}

// startMPS starts the claim's MPS control daemon, if it needs one, and records it.
func (s *state) startMPS(pc *PreparedClaim) error {
	d := mpsDaemon(pc)
	if d == nil {
		return nil
	}
	pid, err := s.mps.Start(*d)
	if err != nil {
		return fmt.Errorf("starting the MPS control daemon of claim %s/%s: %w", pc.Namespace, pc.Name, err)
	}
	d.PID = pid
	pc.MPS = d
	s.logger.V(2).Info("Started the claim's MPS control daemon", "claim", klog.KRef(pc.Namespace, pc.Name), "pid", pid, "devices", d.Devices, "pipeDir", d.PipeDir)
	return s.hook.at(PointMPSStarted)
}

// stopMPS stops the MPS control daemon of the claim with this UID, if one runs.
func (s *state) stopMPS(uid types.UID) error {
	pipe := s.planner.mpsPipeDir(string(uid))
	running, err := s.mps.Running(pipe)
	if err != nil {
		return fmt.Errorf("MPS control daemon in %s: %w", pipe, err)
	}
	if !running {
		return nil
	}
	if err := s.mps.Stop(pipe); err != nil {
		return fmt.Errorf("stopping the MPS control daemon in %s: %w", pipe, err)
	}
	return nil
}

// restoreMPS restarts a prepared claim's MPS control daemon that is not running (the
// plugin's container, and the daemons it started, may have been restarted), or whose
// devices changed (a MIG instance re-created).
func (s *state) restoreMPS(pc *PreparedClaim, devicesChanged bool) error {
	if mpsDaemon(pc) == nil {
		return nil
	}
	running, err := s.mps.Running(s.planner.mpsPipeDir(string(pc.UID)))
	if err != nil {
		return err
	}
	if running && !devicesChanged {
		return nil
	}
	if running {
		if err := s.stopMPS(pc.UID); err != nil {
			return err
		}
	}
	s.logger.Info("Restarting the MPS control daemon of a prepared claim", "claim", klog.KRef(pc.Namespace, pc.Name))
	for _, dir := range []string{s.planner.mpsPipeDir(string(pc.UID)), s.planner.mpsLogDir(string(pc.UID))} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("creating %s: %w", dir, err)
		}
	}
	return s.startMPS(pc)
}

// removeUnknownMPS stops the MPS control daemons, and removes the directories, of
// claims the checkpoint does not know.
func (s *state) removeUnknownMPS() error {
	entries, err := os.ReadDir(filepath.Join(s.planner.stateDir, "mps"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		uid := types.UID(e.Name())
		if !e.IsDir() || s.cp.Claims[uid] != nil || isSpare(e.Name()) {
			continue
		}
		if running, _ := s.mps.Running(s.planner.mpsPipeDir(string(uid))); running {
			s.logger.Info("Stopping an MPS control daemon no prepared claim accounts for", "claimUID", uid)
		}
		if err := s.stopMPS(uid); err != nil {
			errs = append(errs, err)
			continue
		}
		s.removeClaimDirs(uid)
	}
	return errors.Join(errs...)
}

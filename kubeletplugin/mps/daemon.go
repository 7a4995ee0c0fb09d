package mps

import (
	"errors"

	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// Control starts and stops MPS control daemons. A daemon is found by its pipe
// directory, never by a remembered process id, so that a plugin that died between
// starting a daemon and recording it still finds the daemon.
type Control interface {
	// Start starts the daemon, waits until it answers and applies its limits. It
	// returns the daemon's process id (0 when there is no process, as with a double).
	Start(d prepared.MPSDaemon) (pid int, err error)
	// Stop asks the daemon listening in pipeDir to quit and waits until it has; no
	// daemon there is no error.
	Stop(pipeDir string) error
	// Running reports whether a daemon listens in pipeDir.
	Running(pipeDir string) (bool, error)
}

// ErrDaemonGoing is an MPS control daemon asked to stop that has not gone yet (a pod
// that takes its time): what needs it gone (the claim's directories, a new daemon) is
// tried again later, by the kubelet or the plugin's background repair.
var ErrDaemonGoing = errors.New("the MPS control daemon is still stopping")

// DaemonOf is the daemon the claim needs, nil when none of its devices runs under MPS.
// MIG devices must have been created (their UUIDs are known only then).
func DaemonOf(pc *prepared.Claim) *prepared.MPSDaemon {
	var d *prepared.MPSDaemon
	for _, dev := range pc.Devices {
		m := dev.CDI.MPS
		if m == nil {
			continue
		}
		if d == nil {
			d = &prepared.MPSDaemon{PipeDir: m.PipeDir, LogDir: m.LogDir, ShmDir: m.ShmDir}
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

package kubeletplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/kubeletplugin/mps"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// MPSControl starts and stops MPS control daemons. A daemon is found by its pipe
// directory, never by a remembered process id, so that a plugin that died between
// starting a daemon and recording it still finds the daemon.
type MPSControl interface {
	// Start starts the daemon, waits until it answers and applies its limits. It
	// returns the daemon's process id (0 when there is no process, as with a double).
	Start(d prepared.MPSDaemon) (pid int, err error)
	// Stop asks the daemon listening in pipeDir to quit and waits until it has; no
	// daemon there is no error.
	Stop(pipeDir string) error
	// Running reports whether a daemon listens in pipeDir.
	Running(pipeDir string) (bool, error)
}

// mpsManager is the MPS side of the node's claims: each claim's MPS control daemon
// (through an MPSControl), its MPS directory tree (<state dir>/mps/<claim UID>/{pipe,log,
// shm}, the shm directory a tmpfs where the plugin may mount one) and the spare trees
// that prepares take (spares.go). The state holds one and calls, under the node's lock:
//
//   - prepare, for a claim being prepared: its directories and daemon; waitFor, the
//     daemon that the prepare waits for (waitReady) once the lock is released;
//   - restore, for a prepared claim at start-up, in a repair, or when the kubelet asks
//     again: a daemon or directories that went;
//   - requestStop or stop, when a claim is unprepared or rolled back (requestStop names
//     a daemon still stopping, which waitGone waits for without the lock), removeDirs
//     once its daemon has gone, and makeSpares after an unprepare;
//   - stopUnknown, resetSpares and checkSearchable at start-up, for what no claim
//     accounts for;
//
// and without it waitReady, waitGone and running (the health check of daemons that are
// processes, repairs.checkDaemons, which runs when pollsDaemons says). removeSpares runs
// when the plugin stops, under the state's mutex.
type mpsManager struct {
	ctl MPSControl
	// root is <state dir>/mps, which holds the claims' trees and the spares.
	root   string
	hook   Hook
	logger klog.Logger
	// spares are the empty MPS directory trees ready for claims (spares.go).
	spares []string
	// mountShm mounts a claim's shm tmpfs (mps.MountShm; tests make it fail as without
	// privilege) and unmountShm unmounts it (mps.UnmountShm). shmFallback and
	// shmPropagation log, once, that the plugin may not mount and that its mounts do not
	// propagate.
	mountShm, unmountShm        func(dir string) error
	shmFallback, shmPropagation sync.Once
	// startMounts, while the plugin starts (recordStartMounts), are the shm tmpfs mounted
	// since, which a start that fails unmounts (undoStartMounts).
	startMounts *[]string
}

// mpsDirName is the directory of the MPS trees in the plugin's state directory.
const mpsDirName = "mps"

func newMPSManager(ctl MPSControl, stateDir string, hook Hook, logger klog.Logger) *mpsManager {
	return &mpsManager{ctl: ctl, root: filepath.Join(stateDir, mpsDirName), hook: hook, logger: logger,
		mountShm: shmMounts.mount, unmountShm: shmMounts.unmount}
}

// shmMounts are how new mpsManagers mount and unmount the shm tmpfs (tests stub them).
var shmMounts = struct{ mount, unmount func(dir string) error }{mps.MountShm, mps.UnmountShm}

// mpsClaimDir is the claim's MPS directory tree under the plugin's state directory;
// the planner puts the claim's cdi.MPS directories in it.
func mpsClaimDir(stateDir, claimUID string) string {
	return filepath.Join(stateDir, mpsDirName, claimUID)
}

// claimDir, pipeDir and shmDir are the claim's MPS directories (as planned in cdi.MPS).
func (m *mpsManager) claimDir(uid types.UID) string { return filepath.Join(m.root, string(uid)) }

func (m *mpsManager) pipeDir(uid types.UID) string { return filepath.Join(m.claimDir(uid), "pipe") }

func (m *mpsManager) shmDir(uid types.UID) string { return filepath.Join(m.claimDir(uid), "shm") }

// prepare makes the MPS directories of a claim being prepared (renaming a spare tree
// into place when there is one) and starts its MPS control daemon, if it needs one;
// nothing for a claim none of whose devices runs under MPS. MIG devices must have been
// created.
func (m *mpsManager) prepare(pc *prepared.Claim) error {
	if slices.ContainsFunc(pc.Devices, func(d prepared.Device) bool { return d.CDI.MPS != nil }) {
		m.takeSpare(pc.UID)
	}
	for _, d := range pc.Devices {
		if c := d.CDI.MPS; c != nil {
			if _, err := m.makeDirs(c.PipeDir, c.LogDir, c.ShmDir); err != nil {
				return err
			}
		}
	}
	return m.start(pc)
}

// start starts the claim's MPS control daemon, if it needs one, and records it.
func (m *mpsManager) start(pc *prepared.Claim) error {
	d := mps.DaemonOf(pc)
	if d == nil {
		return nil
	}
	var pid int
	var err error
	if deferred, ok := m.ctl.(mpsDeferred); ok {
		err = deferred.Create(*d)
	} else {
		pid, err = m.ctl.Start(*d)
	}
	if err != nil {
		return fmt.Errorf("starting the MPS control daemon of claim %s/%s: %w", pc.Namespace, pc.Name, err)
	}
	d.PID = pid
	pc.MPS = d
	m.logger.V(2).Info("Started the claim's MPS control daemon", "claim", klog.KRef(pc.Namespace, pc.Name), "pid", pid, "devices", d.Devices, "pipeDir", d.PipeDir)
	return m.hook.At(PointMPSStarted)
}

// mpsDeferred is an MPSControl whose daemons take long to start and to stop (mps.Pods: a
// pod): under the node's lock the plugin only asks for a daemon or for its end, and waits
// for either after releasing the lock (prepareClaim, unprepare), so that other claims'
// prepares and unprepares on the node need not wait for it.
type mpsDeferred interface {
	// Create starts the daemon, or finds it started, without waiting for it.
	Create(d prepared.MPSDaemon) error
	// WaitReady waits until the daemon listening in pipeDir is ready, or ctx ends, and
	// says why it is not.
	WaitReady(ctx context.Context, pipeDir string) error
	// Delete asks the daemon listening in pipeDir to stop, without waiting for it, and
	// reports whether it is gone already.
	Delete(pipeDir string) (gone bool, err error)
	// WaitGone waits until the daemon listening in pipeDir is gone, or ctx ends.
	WaitGone(ctx context.Context, pipeDir string) error
}

var _ mpsDeferred = mps.Pods{}

// mpsDaemonLister is an MPSControl that can list its daemons (mps.Pods), whose
// Deployments may outlive the directories the start-up clean-up goes by.
type mpsDaemonLister interface {
	PipeDirs() ([]string, error)
}

// waitFor is the pipe directory of the claim's daemon that the prepare must wait for
// once the node's lock is released ("" when none: no daemon, or one started ready).
func (m *mpsManager) waitFor(pc *prepared.Claim) string {
	if _, ok := m.ctl.(mpsDeferred); !ok || pc.MPS == nil {
		return ""
	}
	return pc.MPS.PipeDir
}

// waitReady waits for the daemon waitFor named.
func (m *mpsManager) waitReady(ctx context.Context, pipeDir string) error {
	if pipeDir == "" {
		return nil
	}
	return m.ctl.(mpsDeferred).WaitReady(ctx, pipeDir)
}

// requestStop stops the MPS control daemon of the claim with this UID, or, for one that
// takes long to stop (mpsDeferred), asks it to and returns its pipe directory to wait
// for, without the node's lock, when it has not gone yet.
func (m *mpsManager) requestStop(uid types.UID) (wait string, err error) {
	if _, ok := m.ctl.(mpsDeferred); !ok {
		return "", m.stop(uid)
	}
	err = m.stop(uid)
	if errors.Is(err, mps.ErrDaemonGoing) {
		return m.pipeDir(uid), nil
	}
	return "", err
}

// waitGone waits for the daemon requestStop named.
func (m *mpsManager) waitGone(ctx context.Context, pipeDir string) error {
	if pipeDir == "" {
		return nil
	}
	return m.ctl.(mpsDeferred).WaitGone(ctx, pipeDir)
}

// stop stops the MPS control daemon of the claim with this UID, if one runs. One that
// takes long to stop (mpsDeferred) is asked to, and mps.ErrDaemonGoing says it has not
// gone yet: stop never waits for it.
func (m *mpsManager) stop(uid types.UID) error {
	pipe := m.pipeDir(uid)
	if d, ok := m.ctl.(mpsDeferred); ok {
		gone, err := d.Delete(pipe)
		if err != nil {
			return fmt.Errorf("stopping the MPS control daemon in %s: %w", pipe, err)
		}
		if !gone {
			return fmt.Errorf("MPS control daemon in %s: %w", pipe, mps.ErrDaemonGoing)
		}
		return nil
	}
	running, err := m.ctl.Running(pipe)
	if err != nil {
		return fmt.Errorf("MPS control daemon in %s: %w", pipe, err)
	}
	if !running {
		return nil
	}
	if err := m.ctl.Stop(pipe); err != nil {
		return fmt.Errorf("stopping the MPS control daemon in %s: %w", pipe, err)
	}
	return nil
}

// running reports whether a daemon listens in pipeDir.
func (m *mpsManager) running(pipeDir string) (bool, error) { return m.ctl.Running(pipeDir) }

// pollsDaemons reports whether the health check must look for daemons that exited
// (repairs.checkDaemons): processes, which die apart from the plugin. Daemons in pods
// are restarted by their Deployments.
func (m *mpsManager) pollsDaemons() bool {
	_, pods := m.ctl.(mpsDeferred)
	return !pods
}

// removeDirs unmounts the claim's shm tmpfs and removes its MPS directories (its MPS
// control daemon must have stopped). A tmpfs that cannot be unmounted is an error, and
// the directories stay for the retry.
func (m *mpsManager) removeDirs(uid types.UID) error {
	if err := m.unmountShm(m.shmDir(uid)); err != nil {
		return fmt.Errorf("claim %s: %w", uid, err)
	}
	if err := os.RemoveAll(m.claimDir(uid)); err != nil {
		m.logger.Error(err, "Removing a claim's directory", "claimUID", uid, "dir", m.claimDir(uid))
	}
	return nil
}

// restore restarts a prepared claim's MPS control daemon that is not running (the
// plugin's container, and the daemons it started, may have been restarted), or whose
// devices changed (a MIG instance re-created), or whose shm directory had to be made
// again (a running daemon sees the old one). The claim's MPS directories are made again
// when missing: a shm tmpfs mounted in the mount namespace of a plugin's container that
// does not propagate its mounts goes with that container. A daemon that takes long to
// stop (a pod) is asked to, and the restart fails with mps.ErrDaemonGoing until it has
// gone, for a later try to finish.
func (m *mpsManager) restore(pc *prepared.Claim, devicesChanged bool) error {
	d := mps.DaemonOf(pc)
	if d == nil {
		return nil
	}
	shmRemade, err := m.makeDirs(d.PipeDir, d.LogDir, d.ShmDir)
	if err != nil {
		return err
	}
	running, err := m.ctl.Running(d.PipeDir)
	if err != nil {
		return err
	}
	if running && !devicesChanged && !shmRemade {
		return nil
	}
	if running {
		if err := m.stop(pc.UID); err != nil {
			return err
		}
	}
	m.logger.Info("Restarting the MPS control daemon of a prepared claim", "claim", klog.KRef(pc.Namespace, pc.Name),
		"wasRunning", running, "devicesChanged", devicesChanged, "shmDirRemade", shmRemade)
	return m.start(pc)
}

// makeDirs makes a claim's MPS directories, or gives existing ones (a spare tree, an
// earlier plugin's) their modes (mps.PipeMode...), and its shm directory unless shmDir is
// "" (a claim recorded without one). It reports whether the shm directory was made anew.
func (m *mpsManager) makeDirs(pipeDir, logDir, shmDir string) (bool, error) {
	claimDir := filepath.Dir(pipeDir)
	for _, dir := range []struct {
		path string
		mode fs.FileMode
	}{{filepath.Dir(claimDir), mps.TreeMode}, {claimDir, mps.TreeMode}, {pipeDir, mps.PipeMode}, {logDir, mps.LogMode}} {
		if err := mps.MkdirMode(dir.path, dir.mode); err != nil {
			return false, fmt.Errorf("creating %s: %w", dir.path, err)
		}
	}
	if shmDir == "" {
		return false, nil
	}
	return m.makeShmDir(shmDir)
}

// makeShmDir makes a claim's shm directory: a tmpfs (mps.MountShm) mounted on it, or,
// where the plugin may not mount one, a plain directory of mode 1777, which the log
// says. It reports whether it made the directory or mounted the tmpfs; nothing is done
// when a tmpfs is mounted there already.
func (m *mpsManager) makeShmDir(dir string) (bool, error) {
	mounted, err := mps.IsMountPoint(dir)
	if err != nil {
		return false, err
	}
	if mounted {
		return false, nil
	}
	_, statErr := os.Stat(dir)
	made := errors.Is(statErr, fs.ErrNotExist)
	if err := mps.MkdirMode(dir, mps.ShmMode); err != nil {
		return false, fmt.Errorf("creating %s: %w", dir, err)
	}
	err = m.mountShm(dir)
	if err == nil {
		if m.startMounts != nil {
			*m.startMounts = append(*m.startMounts, dir)
		}
		m.checkShmPropagation(dir)
		return true, nil
	}
	if !errors.Is(err, unix.EPERM) {
		return false, fmt.Errorf("mounting a tmpfs on %s: %w", dir, err)
	}
	m.shmFallback.Do(func() {
		m.logger.Info("No privilege to mount a tmpfs (CAP_SYS_ADMIN): the shm directories of MPS claims are plain directories on the plugin's state directory's filesystem, without a size limit",
			"example", dir, "err", err)
	})
	m.logger.V(2).Info("The claim's shm directory is a plain directory", "shmDir", dir, "err", err)
	return made, nil
}

// checkShmPropagation warns, once, when the tmpfs just mounted on dir is not shared with
// other mount namespaces: a plugin running in a container whose state directory is not
// mounted with bidirectional propagation mounts it in its own mount namespace only, and
// the container runtime, which resolves the CDI spec's host path in the node's, gives
// the claim's containers the empty directory beneath it.
func (m *mpsManager) checkShmPropagation(dir string) {
	m.shmPropagation.Do(func() {
		mnt, err := mps.MountOf(dir)
		if err != nil {
			m.logger.Error(err, "Cannot tell whether the MPS shm tmpfs mounts reach the container runtime")
			return
		}
		if !mnt.Shared {
			m.logger.Info("WARNING: the MPS claims' shm tmpfs mounts do not propagate out of this mount namespace: if the plugin runs in a container, mount its state directory with mountPropagation: Bidirectional, or the claims' containers will not share /dev/shm with their MPS control daemons",
				"mountPoint", mnt.MountPoint, "fsType", mnt.FSType)
		}
	})
}

// checkSearchable warns when users other than root cannot pass through the
// directories above the claims' MPS directories: the MPS control daemon runs the MPS
// server of a client that runs as another uid with that uid, and the server must reach
// the pipe directory, in the daemon's view (the plugin's state directory), or the
// client fails. Only for real daemons.
func (m *mpsManager) checkSearchable() {
	switch ctl := m.ctl.(type) {
	case mps.Process:
	case mps.Pods:
		if ctl.Simulated {
			return
		}
	default:
		return
	}
	if dir, mode := mps.Unsearchable(m.root); dir != "" {
		m.logger.Info("WARNING: MPS clients that run as a non-root user will fail: the MPS control daemon runs their MPS server with their uid, which cannot pass through this directory to the claim's pipe directory (give others search permission, o+x)",
			"dir", dir, "mode", mode.String())
	}
}

// stopUnknown stops the MPS control daemons of claims the checkpoint does not know
// (known reports false), found by their directory trees and, for an MPSControl that
// lists its daemons (mps.Pods), by its list. It returns the claims with a tree whose
// daemon has gone (their directories can go: removeDirs) and those whose daemon is
// still stopping (a daemon in a pod: a later repair removes their directories).
func (m *mpsManager) stopUnknown(known func(types.UID) bool) (gone, going []types.UID, err error) {
	entries, err := os.ReadDir(m.root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var errs []error
	for _, e := range entries {
		uid := types.UID(e.Name())
		if !e.IsDir() || known(uid) || isSpare(e.Name()) {
			continue
		}
		if running, _ := m.ctl.Running(m.pipeDir(uid)); running {
			m.logger.Info("Stopping an MPS control daemon no prepared claim accounts for", "claimUID", uid)
		}
		err := m.stop(uid)
		switch {
		case errors.Is(err, mps.ErrDaemonGoing):
			going = append(going, uid)
		case err != nil:
			errs = append(errs, err)
		default:
			gone = append(gone, uid)
		}
	}
	return gone, going, errors.Join(append(errs, m.stopUnlisted(known))...)
}

// stopUnlisted stops the daemons an MPSControl that lists its daemons (mps.Pods) runs for
// claims the checkpoint does not know, whatever became of their directories (a node's
// state directory wiped, a plugin moved to another one).
func (m *mpsManager) stopUnlisted(known func(types.UID) bool) error {
	lister, ok := m.ctl.(mpsDaemonLister)
	if !ok {
		return nil
	}
	dirs, err := lister.PipeDirs()
	if err != nil {
		return err
	}
	var errs []error
	for _, pipe := range dirs {
		_, uid, err := mps.PodName(pipe)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if known(types.UID(uid)) {
			continue
		}
		m.logger.Info("Stopping an MPS control daemon no prepared claim accounts for", "claimUID", uid, "pipeDir", pipe)
		if d, ok := m.ctl.(mpsDeferred); ok {
			_, err = d.Delete(pipe) // without waiting: no directory of the claim waits for it
		} else {
			err = m.ctl.Stop(pipe)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

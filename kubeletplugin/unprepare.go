package kubeletplugin

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/kubeletplugin/mps"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// unprepareClaim unprepares the claim (unprepare) holding its lock.
func (s *state) unprepareClaim(ctx context.Context, uid types.UID) error {
	if err := checkClaimUID(uid); err != nil {
		return err
	}
	defer s.claims.lock(uid)()
	return s.unprepare(ctx, uid)
}

// unprepare undoes prepare; an unknown claim is already unprepared. Under the node's
// lock it records prepared.UnprepareStarted, removes the claim's CDI spec and stops its MPS
// control daemon; one that takes long to stop (a pod) is asked to, and waited for after
// the lock is released. The rest (MIG instances, directories) is done under the lock
// again, but for the GPUs' time-slices: the claim is recorded with only those left
// (TimeSlicesLeft), and nvidia-smi gives them back after the lock is released, each GPU
// under its own lock (finishRelease), so that a slow nvidia-smi holds up no other claim's
// prepare or unprepare. The checkpoint entry goes last. A plugin that dies meanwhile
// finds the claim prepared.UnprepareStarted at start-up and finishes the unprepare then.
func (s *state) unprepare(ctx context.Context, uid types.UID) error {
	wait, err := s.beginUnprepare(uid)
	if err != nil {
		return err
	}
	if err := s.mps.waitGone(ctx, wait); err != nil {
		return err // the claim stays prepared.UnprepareStarted: the kubelet's next try waits again
	}
	left, err := s.endUnprepare(uid)
	if err != nil || !left {
		return err
	}
	// On failure the claim stays with its time-slices alone: the kubelet's next try gives
	// them back, and its devices are free meanwhile.
	if err := s.finishRelease(ctx, uid); err != nil {
		return err
	}
	return s.hook.At(PointUnprepareCompleted)
}

// beginUnprepare is unprepare's first step; it returns the pipe directory of the
// claim's daemon to wait for ("" when it has gone).
func (s *state) beginUnprepare(uid types.UID) (wait string, err error) {
	unlock, err := s.lockLoaded()
	if err != nil {
		return "", err
	}
	defer unlock()
	pc := s.cp.Claims[uid]
	if pc != nil {
		pc.State = prepared.UnprepareStarted
		if err := s.record(pc, PointUnprepareStartedTorn); err != nil {
			return "", err
		}
		if err := s.hook.At(PointUnprepareStarted); err != nil {
			return "", err
		}
	}
	if err := s.specs.Remove(string(uid)); err != nil {
		return "", err
	}
	if pc != nil {
		if err := s.hook.At(PointCDIRemoved); err != nil {
			return "", err
		}
	}
	return s.mps.requestStop(uid)
}

// endUnprepare is unprepare's step under the node's lock once the claim's daemon has
// gone: it releases what the claim holds but its GPUs' time-slices, and forgets the claim
// or, with time-slices to give back, reports them left.
func (s *state) endUnprepare(uid types.UID) (left bool, err error) {
	unlock, err := s.lockLoaded()
	if err != nil {
		return false, err
	}
	defer unlock()
	pc := s.cp.Claims[uid]
	if err := s.mps.stop(uid); err != nil {
		return false, err
	}
	if pc == nil {
		return false, s.removeClaimDirs(uid)
	}
	if pc.State != prepared.UnprepareStarted {
		return false, fmt.Errorf("claim %s/%s is %s again (another plugin instance prepared it while its unprepare waited for its MPS control daemon to stop)", pc.Namespace, pc.Name, pc.State)
	}
	gpus, err := s.release(pc, nil)
	if err != nil {
		return false, err
	}
	if left, err = s.leave(pc, gpus); err != nil {
		return false, err
	}
	if err := s.mps.makeSpares(); err != nil {
		s.logger.Error(err, "Creating spare MPS directories")
	}
	if left {
		return true, nil
	}
	return false, s.hook.At(PointUnprepareCompleted)
}

// leave forgets a released claim or, when gpus have their time-slices to get back, records
// the claim with those alone (TimeSlicesLeft; no devices, which are free for other claims
// then), for finishRelease. A completed claim is prepared.PrepareStarted again: its rollback is
// unfinished.
func (s *state) leave(pc *prepared.Claim, gpus []string) (left bool, err error) {
	if len(gpus) == 0 {
		delete(s.cp.Claims, pc.UID)
		return false, s.forget(pc.UID)
	}
	pc.Devices, pc.MPS, pc.TimeSlicesLeft = nil, nil, gpus
	if pc.State == prepared.PrepareCompleted {
		pc.State = prepared.PrepareStarted
	}
	if err := s.record(pc, PointTimeSlicesLeftTorn); err != nil {
		return false, err
	}
	return true, s.hook.At(PointTimeSlicesLeft)
}

// finishAtStart finishes, at start-up, an unprepare that an earlier plugin did not, or
// rolls back its interrupted prepare: all the claim holds, its GPUs' time-slices included
// (nothing else runs yet), and drops the claim; recover's compaction records that.
// mps.ErrDaemonGoing says the claim's daemon has not gone yet, and the claim stays for the
// background repair; so does a claim whose time-slices could not be given back, recorded
// with those alone.
func (s *state) finishAtStart(pc *prepared.Claim) error {
	gpus, err := s.teardown(pc, nil)
	if err != nil {
		return err
	}
	if err := s.resetTimeSlicesLocked(pc.UID, gpus); err != nil {
		_, lerr := s.leave(pc, gpus)
		return errors.Join(err, lerr)
	}
	delete(s.cp.Claims, pc.UID)
	return nil
}

// undo rolls back a prepare that failed, as far as m says it got. A rollback that
// cannot finish (a daemon's pod still stopping, a GPU that refuses) leaves the claim
// prepared.PrepareStarted for the background repair, and for the kubelet's next prepare, which
// rolls it back first; so does one that left GPUs' time-slices to give back.
func (s *state) undo(pc *prepared.Claim, m *made) error {
	left, err := s.rollback(pc, m)
	if left {
		s.repairs.add(pc.UID, klog.KRef(pc.Namespace, pc.Name), partRollback)
	}
	s.rollbackFailed(pc, err)
	return err
}

// rollbackFailed schedules the repair of a claim whose rollback returned err (when not nil).
func (s *state) rollbackFailed(pc *prepared.Claim, err error) {
	if errors.Is(err, mps.ErrDaemonGoing) {
		s.repairs.add(pc.UID, klog.KRef(pc.Namespace, pc.Name), partRollback)
	} else if err != nil {
		s.repairs.failed(pc.UID, klog.KRef(pc.Namespace, pc.Name), partRollback, err)
	}
}

// rollback undoes what m says a prepare did (all that the claim's record names, with m
// nil) and forgets the claim, but for its GPUs' time-slices: with some to give back, the
// claim stays recorded with those alone, and left says so (finishRelease gives them
// back after the node's lock is released).
func (s *state) rollback(pc *prepared.Claim, m *made) (left bool, err error) {
	gpus, err := s.teardown(pc, m)
	if err != nil {
		return false, fmt.Errorf("rolling back claim %s/%s: %w", pc.Namespace, pc.Name, err)
	}
	return s.leave(pc, gpus)
}

// teardown removes the claim's CDI spec and MPS control daemon, then what release
// removes, and returns the GPUs whose time-slices are to be given back. A daemon that
// takes long to stop (a pod) is asked to, and mps.ErrDaemonGoing says it has not gone
// yet: the rest waits for a later try.
func (s *state) teardown(pc *prepared.Claim, m *made) (timeSlices []string, err error) {
	if err := s.specs.Remove(string(pc.UID)); err != nil {
		return nil, err
	}
	if err := s.hook.At(PointCDIRemoved); err != nil {
		return nil, err
	}
	if err := s.mps.stop(pc.UID); err != nil {
		return nil, err
	}
	return s.release(pc, m)
}

// release removes, once the claim's MPS control daemon has stopped, the MIG instances
// that m says are the claim's (all with m nil) and the claim's directories. It returns
// the GPUs whose time-slices the claim is to give back (timeSlicesToRelease), which it
// leaves alone: the node's lock is not held while nvidia-smi runs.
func (s *state) release(pc *prepared.Claim, m *made) (timeSlices []string, err error) {
	pc.MPS = nil
	if err := s.hook.At(PointMPSStopped); err != nil {
		return nil, err
	}
	for k, d := range pc.Devices {
		if d.MIG != nil && m.createdMIG(k) {
			if err := s.mig.destroy(d.MIG); err != nil {
				return nil, err
			}
		}
	}
	if err := s.hook.At(PointMIGDestroyed); err != nil {
		return nil, err
	}
	gpus := timeSlicesToRelease(pc, m)
	if err := s.removeClaimDirs(pc.UID); err != nil {
		return nil, err
	}
	return gpus, nil
}

// removeClaimDirs removes the claim's MPS and HAMi-core directories and files, its shm tmpfs
// unmounted first (its MPS control daemon must have stopped). A tmpfs that cannot be
// unmounted is an error, and its directories stay for the retry.
func (s *state) removeClaimDirs(uid types.UID) error {
	if err := s.mps.removeDirs(uid); err != nil {
		return err
	}
	s.removeVGPUFiles(uid)
	return nil
}

package kubeletplugin

import (
	"context"
	"errors"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
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
// lock it records UnprepareStarted, removes the claim's CDI spec and stops its MPS
// control daemon; one that takes long to stop (a pod) is asked to, and waited for after
// the lock is released. The rest (MIG instances, time-slices, directories, the
// checkpoint entry) is done under the lock again. A plugin that dies while it waits
// finds the claim UnprepareStarted at start-up and finishes the unprepare then.
func (s *state) unprepare(ctx context.Context, uid types.UID) error {
	wait, err := s.beginUnprepare(uid)
	if err != nil {
		return err
	}
	if err := s.mps.waitGone(ctx, wait); err != nil {
		return err // the claim stays UnprepareStarted: the kubelet's next try waits again
	}
	return s.endUnprepare(uid)
}

// beginUnprepare is unprepare's first step; it returns the pipe directory of the
// claim's daemon to wait for ("" when it has gone).
func (s *state) beginUnprepare(uid types.UID) (wait string, err error) {
	unlock, err := s.lock()
	if err != nil {
		return "", err
	}
	defer unlock()
	if err := s.reload(); err != nil {
		return "", err
	}
	pc := s.cp.Claims[uid]
	if pc != nil {
		pc.State = UnprepareStarted
		if err := s.record(pc, PointUnprepareStartedTorn); err != nil {
			return "", err
		}
		if err := s.hook.at(PointUnprepareStarted); err != nil {
			return "", err
		}
	}
	if err := s.specs.Remove(string(uid)); err != nil {
		return "", err
	}
	if pc != nil {
		if err := s.hook.at(PointCDIRemoved); err != nil {
			return "", err
		}
	}
	return s.mps.requestStop(uid)
}

// endUnprepare is unprepare's last step, once the claim's daemon has gone.
func (s *state) endUnprepare(uid types.UID) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if err := s.reload(); err != nil {
		return err
	}
	pc := s.cp.Claims[uid]
	if err := s.mps.stop(uid); err != nil {
		return err
	}
	if pc == nil {
		return s.removeClaimDirs(uid)
	}
	if pc.State != UnprepareStarted {
		return fmt.Errorf("claim %s/%s is %s again (another plugin instance prepared it while its unprepare waited for its MPS control daemon to stop)", pc.Namespace, pc.Name, pc.State)
	}
	if err := s.release(pc, nil); err != nil {
		return err
	}
	delete(s.cp.Claims, uid)
	if err := s.forget(uid); err != nil {
		return err
	}
	if err := s.mps.makeSpares(); err != nil {
		s.logger.Error(err, "Creating spare MPS directories")
	}
	return s.hook.at(PointUnprepareCompleted)
}

// finishUnprepare finishes, at start-up, an unprepare that an earlier plugin did not;
// errMPSDaemonGoing says the claim's daemon has not gone yet, and the claim stays
// UnprepareStarted for the background repair.
func (s *state) finishUnprepare(pc *PreparedClaim) error {
	if err := s.teardown(pc, nil); err != nil {
		return err
	}
	delete(s.cp.Claims, pc.UID)
	return nil
}

// undo rolls back a prepare that failed, as far as m says it got. A rollback that
// cannot finish (a daemon's pod still stopping, a GPU that refuses) leaves the claim
// PrepareStarted for the background repair, and for the kubelet's next prepare, which
// rolls it back first.
func (s *state) undo(pc *PreparedClaim, m *made) error {
	err := s.rollback(pc, m)
	if errors.Is(err, errMPSDaemonGoing) {
		s.repairs.add(pc.UID, klog.KRef(pc.Namespace, pc.Name), partRollback)
	} else if err != nil {
		s.repairs.failed(pc.UID, klog.KRef(pc.Namespace, pc.Name), partRollback, err)
	}
	return err
}

// rollback undoes what m says a prepare did (all that the claim's record names, with m
// nil) and forgets the claim.
func (s *state) rollback(pc *PreparedClaim, m *made) error {
	if err := s.teardown(pc, m); err != nil {
		return fmt.Errorf("rolling back claim %s/%s: %w", pc.Namespace, pc.Name, err)
	}
	delete(s.cp.Claims, pc.UID)
	return s.forget(pc.UID)
}

// teardown removes the claim's CDI spec and MPS control daemon, then what release
// removes. A daemon that takes long to stop (a pod) is asked to, and errMPSDaemonGoing
// says it has not gone yet: the rest waits for a later try.
func (s *state) teardown(pc *PreparedClaim, m *made) error {
	if err := s.specs.Remove(string(pc.UID)); err != nil {
		return err
	}
	if err := s.hook.at(PointCDIRemoved); err != nil {
		return err
	}
	if err := s.mps.stop(pc.UID); err != nil {
		return err
	}
	return s.release(pc, m)
}

// release removes, once the claim's MPS control daemon has stopped, the MIG instances
// and time-slices that m says are the claim's (all with m nil) and the claim's
// directories.
func (s *state) release(pc *PreparedClaim, m *made) error {
	pc.MPS = nil
	if err := s.hook.at(PointMPSStopped); err != nil {
		return err
	}
	for k, d := range pc.Devices {
		if d.MIG != nil && m.createdMIG(k) {
			if err := s.mig.destroy(d.MIG); err != nil {
				return err
			}
		}
	}
	if err := s.hook.at(PointMIGDestroyed); err != nil {
		return err
	}
	if err := s.releaseTimeSlices(pc, m); err != nil {
		return err
	}
	return s.removeClaimDirs(pc.UID)
}

// removeClaimDirs removes the claim's MPS and HAMi-core directories, its shm tmpfs
// unmounted first (its MPS control daemon must have stopped). A tmpfs that cannot be
// unmounted is an error, and its directories stay for the retry.
func (s *state) removeClaimDirs(uid types.UID) error {
	if err := s.mps.removeDirs(uid); err != nil {
		return err
	}
	dir := s.planner.cacheDir(string(uid))
	if err := os.RemoveAll(dir); err != nil {
		s.logger.Error(err, "Removing a claim's directory", "claimUID", uid, "dir", dir)
	}
	return nil
}

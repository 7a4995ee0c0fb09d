package kubeletplugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/kubeletplugin/checkpoint"
	"github.com/gpudra/gpudra/kubeletplugin/mps"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// recover brings the node to a consistent state at start-up: a corrupt checkpoint is
// set aside and rebuilt from the CDI specs; a checkpoint from another boot is dropped; a
// checkpoint and its journal (or a v1 checkpoint) are compacted into a new checkpoint;
// interrupted prepares are rolled back and interrupted unprepares finished; completed
// claims get back a missing MIG instance, CDI spec or MPS control daemon and their
// time-slices; CDI specs, MPS control daemons and (with the dynamic MIG strategy) MIG
// instances that no claim accounts for are removed.
//
// A completed claim stays prepared whatever fails: the kubelet never prepares a running
// pod's claim again, and its containers use what the claim holds. What could not be
// restored, rolled back or finished is reported (log, metric, an Event on the claim) and
// tried again in the background (repairs) until it works or the claim is unprepared; the
// plugin starts all the same. Only a checkpoint that cannot be read or written fails the
// start-up.
func (s *state) recover() error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	cp, err := s.store.Load()
	if errors.Is(err, checkpoint.ErrCorrupt) {
		s.corruptions++
		aside, rerr := s.store.SetAside(time.Now())
		s.logger.Error(err, "Checkpoint is corrupt: set aside, rebuilding it from the CDI specs on disk", "setAside", aside)
		if rerr != nil {
			return fmt.Errorf("setting the corrupt checkpoint aside: %w", rerr)
		}
		cp = s.rebuild()
	} else if err != nil {
		return err
	}
	if cp.BootID != "" && cp.BootID != s.bootID {
		s.logger.Info("Node rebooted since the checkpoint was written: dropping its claims", "checkpointBootID", cp.BootID, "bootID", s.bootID, "claims", len(cp.Claims))
		cp.Claims = map[types.UID]*prepared.Claim{}
	}
	cp.BootID = s.bootID
	s.cp = cp
	// Records of the rollbacks below go to a journal of this checkpoint, this boot's.
	if err := s.store.Compact(cp); err != nil {
		return err
	}
	uids := make([]types.UID, 0, len(cp.Claims))
	for uid := range cp.Claims {
		uids = append(uids, uid)
	}
	slices.Sort(uids)
	var errs []error
	for _, uid := range uids {
		pc := cp.Claims[uid]
		ref := klog.KRef(pc.Namespace, pc.Name)
		if err := checkClaimUID(uid); err != nil {
			// No path is built from it: an entry no Kubernetes claim can have.
			s.logger.Error(err, "Dropping a checkpoint entry whose UID cannot be a claim's", "claim", ref)
			delete(cp.Claims, uid)
			continue
		}
		switch pc.State {
		case prepared.PrepareCompleted:
			part, err := s.restore(pc, false)
			if err == nil {
				part = partTimeSlice
				err = s.applyTimeSlices(context.Background(), pc)
			}
			if err != nil {
				s.repairs.failed(uid, ref, part, err)
			}
		case prepared.UnprepareStarted:
			s.logger.Info("Finishing an interrupted unprepare", "claim", ref)
			if err := s.finishAtStart(pc); errors.Is(err, mps.ErrDaemonGoing) {
				s.repairs.add(uid, ref, partUnprepare)
			} else if err != nil {
				s.repairs.failed(uid, ref, partUnprepare, err)
			}
		default:
			s.logger.Info("Rolling back an interrupted prepare", "claim", ref, "state", pc.State)
			err := s.finishAtStart(pc)
			if err != nil {
				err = fmt.Errorf("rolling back claim %s/%s: %w", pc.Namespace, pc.Name, err)
			}
			if errors.Is(err, mps.ErrDaemonGoing) {
				s.repairs.add(uid, ref, partRollback)
			} else if err != nil {
				s.repairs.failed(uid, ref, partRollback, err)
			}
		}
	}
	errs = append(errs, s.removeUnknownSpecs(), s.removeUnknownMPS(), s.removeUnknownVGPU(), s.removeUnknownMIG(), s.mps.resetSpares(), s.store.Compact(s.cp))
	s.mps.checkSearchable()
	return errors.Join(errs...)
}

// rebuild recovers the completed claims recorded in the CDI specs' annotations.
func (s *state) rebuild() *checkpoint.Data {
	cp := &checkpoint.Data{BootID: s.bootID, Claims: map[types.UID]*prepared.Claim{}}
	onDisk, err := s.specs.Claims()
	if err != nil {
		s.logger.Error(err, "Listing CDI specs to rebuild the checkpoint")
		return cp
	}
	for uid, rec := range onDisk {
		pc, err := checkpoint.UnmarshalClaim([]byte(rec), false) // "" (no record) does not decode
		if err != nil || string(pc.UID) != uid || checkClaimUID(pc.UID) != nil {
			continue // removed below as a spec no claim accounts for
		}
		pc.State = prepared.PrepareCompleted
		cp.Claims[pc.UID] = pc
	}
	return cp
}

// restore re-creates a completed claim's missing MIG instances and CDI spec (a
// simulated GPU does not outlive the plugin; a spec directory may be a tmpfs) and
// restarts its MPS control daemon when it is not running (daemons die with the plugin's
// container). The spec is written again when missing, when a MIG instance was re-created
// (its ids changed), or with rewrite (a repair: an earlier try may have re-created one).
// It removes nothing the claim holds; on failure it says which part (partMIG...) failed.
// Its callers set the claim's time-slices again then (a GPU reset forgets them): start-up
// recovery under the node's lock, the background repair after it is released.
func (s *state) restore(pc *prepared.Claim, rewrite bool) (part string, err error) {
	rewrite = rewrite || !s.specs.Exists(string(pc.UID))
	migRecreated := false
	for k := range pc.Devices {
		d := &pc.Devices[k]
		if d.MIG == nil {
			continue
		}
		list, err := s.mig.list(d.MIG.Parent)
		if err != nil {
			return partMIG, err
		}
		found := slices.ContainsFunc(list, func(e existing) bool { return e.giProfileID == d.MIG.GIProfileID && e.start == d.MIG.Start })
		if !found {
			if err := s.createMIG(d); err != nil {
				return partMIG, err
			}
			rewrite, migRecreated = true, true
		}
	}
	if err := makeVGPUFiles(pc); err != nil {
		return partSpec, err
	}
	if rewrite {
		if _, err := s.writeSpec(pc); err != nil {
			return partSpec, err
		}
	}
	if err := s.mps.restore(pc, migRecreated); err != nil {
		return partMPS, err
	}
	return "", nil
}

func (s *state) removeUnknownSpecs() error {
	onDisk, err := s.specs.Claims()
	if err != nil {
		return err
	}
	var errs []error
	for uid := range onDisk {
		if s.cp.Claims[types.UID(uid)] == nil {
			s.logger.Info("Removing a CDI spec no prepared claim accounts for", "claimUID", uid)
			errs = append(errs, s.specs.Remove(uid))
		}
	}
	return errors.Join(errs...)
}

// removeUnknownMPS stops the MPS control daemons, and removes the directories, of
// claims the checkpoint does not know. The directories of a daemon still stopping (a
// pod) go once it has: a repair of a claim the checkpoint does not know removes them.
func (s *state) removeUnknownMPS() error {
	gone, going, err := s.mps.stopUnknown(func(uid types.UID) bool { return s.cp.Claims[uid] != nil })
	for _, uid := range going {
		s.repairs.add(uid, klog.ObjectRef{}, partUnprepare)
	}
	errs := []error{err}
	for _, uid := range gone {
		errs = append(errs, s.removeClaimDirs(uid))
	}
	return errors.Join(errs...)
}

// removeUnknownMIG destroys MIG instances no prepared claim accounts for; only with
// the dynamic strategy, where every instance is the plugin's.
func (s *state) removeUnknownMIG() error {
	if !s.dynamic {
		return nil
	}
	var errs []error
	for _, g := range s.planner.inv.GPUs {
		if g.MIG == nil {
			continue
		}
		list, err := s.mig.list(g.Index)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range list {
			if !s.accounted(g.Index, e) {
				s.logger.Info("Destroying a MIG instance no prepared claim accounts for", "gpu", g.Index, "start", e.start, "size", e.size)
				errs = append(errs, s.mig.destroyInstance(g.Index, e))
			}
		}
	}
	return errors.Join(errs...)
}

func (s *state) accounted(gpu int, e existing) bool {
	for _, pc := range s.cp.Claims {
		for _, d := range pc.Devices {
			if m := d.MIG; m != nil && m.Parent == gpu && m.GIProfileID == e.giProfileID && m.Start == e.start {
				return true
			}
		}
	}
	return false
}

package kubeletplugin

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/driver"
)

// Hook is called at each named point of prepare and unprepare. Tests use it to inject
// crashes (panic, then start a fresh plugin on the same directories) or failures.
type Hook func(point string) error

func (h Hook) at(point string) error {
	if h == nil {
		return nil
	}
	return h(point)
}

// The points at which Hook is called, in the order they are reached. The ...Torn
// points are reached with half of a journal record written (as when the plugin is
// killed in the middle of the write).
const (
	PointPrepareStartedTorn   = "prepare-started-torn"   // half the PrepareStarted record in the journal
	PointPrepareStarted       = "prepare-started"        // checkpoint says PrepareStarted
	PointMIGInstanceCreated   = "mig-instance-created"   // GPU instance exists, compute instance not yet
	PointMIGReady             = "mig-ready"              // GPU and compute instance exist
	PointMPSStarted           = "mps-started"            // the claim's MPS control daemon runs, not yet recorded
	PointCDIWritten           = "cdi-written"            // CDI spec on disk
	PointPrepareCompletedTorn = "prepare-completed-torn" // half the PrepareCompleted record in the journal
	PointPrepareCompleted     = "prepare-completed"      // checkpoint says PrepareCompleted
	PointUnprepareStartedTorn = "unprepare-started-torn" // half the UnprepareStarted record in the journal
	PointUnprepareStarted     = "unprepare-started"      // checkpoint says UnprepareStarted
	PointCDIRemoved           = "cdi-removed"
	PointMPSStopped           = "mps-stopped" // the claim's MPS control daemon (if any) is gone
	PointMIGDestroyed         = "mig-destroyed"
	PointClaimRemovedTorn     = "claim-removed-torn"  // half the record removing the claim in the journal
	PointUnprepareCompleted   = "unprepare-completed" // claim gone from the checkpoint

	// PointCheckpointCompacted is reached when the journal has grown and its claims are
	// in a new checkpoint file, before a new journal replaces the old one; at start-up
	// (recovery compacts) or after any record.
	PointCheckpointCompacted = "checkpoint-compacted"
)

// PreparePoints and UnpreparePoints list the hook points of each operation;
// CompactionPoints those of a compaction.
var (
	PreparePoints = []string{PointPrepareStartedTorn, PointPrepareStarted, PointMIGInstanceCreated, PointMIGReady,
		PointMPSStarted, PointCDIWritten, PointPrepareCompletedTorn, PointPrepareCompleted}
	UnpreparePoints = []string{PointUnprepareStartedTorn, PointUnprepareStarted, PointCDIRemoved, PointMPSStopped,
		PointMIGDestroyed, PointClaimRemovedTorn, PointUnprepareCompleted}
	CompactionPoints = []string{PointCheckpointCompacted}
)

// state is the node's prepared claims: the checkpoint, the CDI specs, the MIG
// instances, the MPS control daemons and the GPUs' time-slices, kept consistent under a
// node-wide lock (a mutex and a file lock, so that two plugin instances during a
// rolling update never interleave).
type state struct {
	mu         sync.Mutex
	lockPath   string
	store      *checkpointStore
	cp         *checkpointData
	bootID     string
	specs      *cdi.Specs
	planner    *planner
	mig        migInstances
	dynamic    bool // MIG strategy dynamic: the plugin owns MIG mode and instances
	mps        MPSControl
	timeSlicer TimeSlicer
	hook       Hook
	logger     klog.Logger
	// Corruptions counts corrupt checkpoints set aside.
	corruptions int
	// spares are the empty MPS directory trees ready for claims (spares.go).
	spares []string
	// mountShm mounts a claim's shm tmpfs (mountMPSShm; tests make it fail as without
	// privilege). shmFallback and shmPropagation log, once, that the plugin may not mount
	// and that its mounts do not propagate.
	mountShm                    func(dir string) error
	shmFallback, shmPropagation sync.Once
}

func (s *state) lock() (func(), error) {
	s.mu.Lock()
	f, err := os.OpenFile(s.lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("node lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		s.mu.Unlock()
		return nil, fmt.Errorf("node lock: %w", err)
	}
	return func() {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
		s.mu.Unlock()
	}, nil
}

// record appends the claim's record, as it is now, to the checkpoint journal.
func (s *state) record(pc *PreparedClaim, torn string) error {
	return s.store.put(s.cp, pc, torn)
}

// forget appends to the checkpoint journal that the claim is gone (deleted from s.cp).
func (s *state) forget(uid types.UID) error {
	return s.store.remove(s.cp, uid, PointClaimRemovedTorn)
}

// reload re-reads the checkpoint and its journal when another plugin instance (a
// rolling update) has written them since this one last did, or when this one could not
// finish a write.
func (s *state) reload() error {
	if s.store.unchanged() {
		return nil
	}
	cp, err := s.store.load()
	if err != nil {
		return err
	}
	s.cp = cp
	return nil
}

func results(pc *PreparedClaim) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(pc.Devices))
	for _, d := range pc.Devices {
		dev := kubeletplugin.Device{
			Requests:     []string{d.Request},
			PoolName:     d.Pool,
			DeviceName:   d.Device,
			CDIDeviceIDs: []string{cdi.DeviceID(d.CDI.Name)},
		}
		if d.ShareID != "" {
			id := types.UID(d.ShareID)
			dev.ShareID = &id
		}
		out = append(out, dev)
	}
	return out
}

// prepare makes the claim's devices usable and returns them with their CDI ids. It is
// idempotent: a prepared claim returns the same devices.
func (s *state) prepare(claim *resourceapi.ResourceClaim) (devs []kubeletplugin.Device, waitMPS string, err error) {
	unlock, err := s.lock()
	if err != nil {
		return nil, "", err
	}
	defer unlock()
	if err := s.reload(); err != nil {
		return nil, "", err
	}
	uid := claim.UID
	if pc := s.cp.Claims[uid]; pc != nil {
		if pc.State == PrepareCompleted {
			if !s.specs.Exists(string(uid)) {
				if _, err := s.writeSpec(pc); err != nil {
					return nil, "", err
				}
			}
			// Its MPS control daemon may have died (with an earlier plugin container).
			before := pc.MPS
			if err := s.restoreMPS(pc, false); err != nil {
				return nil, "", err
			}
			if pc.MPS != before {
				if err := s.record(pc, PointPrepareCompletedTorn); err != nil {
					return nil, "", err
				}
			}
			return results(pc), s.mpsToWaitFor(pc), nil
		}
		if err := s.rollback(pc); err != nil {
			return nil, "", err
		}
	}
	planned, err := s.planner.plan(claim)
	if err != nil {
		return nil, "", err
	}
	if err := s.checkExclusive(uid, planned); err != nil {
		return nil, "", err
	}
	pc := &PreparedClaim{UID: uid, Namespace: claim.Namespace, Name: claim.Name, PodClaimName: claim.Annotations[resourceapi.PodResourceClaimAnnotation],
		State: PrepareStarted, Devices: planned}
	if err := s.checkTimeSlices(pc); err != nil {
		return nil, "", err
	}
	s.cp.Claims[uid] = pc
	if err := s.record(pc, PointPrepareStartedTorn); err != nil {
		delete(s.cp.Claims, uid)
		return nil, "", err
	}
	if err := s.hook.at(PointPrepareStarted); err != nil {
		return nil, "", errors.Join(err, s.rollback(pc))
	}
	rec, err := s.realize(pc)
	if err != nil {
		return nil, "", errors.Join(err, s.rollback(pc))
	}
	pc.State = PrepareCompleted
	// rec is pc as completed, as the CDI spec's annotation has it: marshaled once.
	if err := s.store.putRecord(s.cp, rec, PointPrepareCompletedTorn); err != nil {
		return nil, "", errors.Join(err, s.rollback(pc))
	}
	if err := s.hook.at(PointPrepareCompleted); err != nil {
		return nil, "", err
	}
	return results(pc), s.mpsToWaitFor(pc), nil
}

// checkExclusive refuses devices that another claim prepared on this node holds.
func (s *state) checkExclusive(uid types.UID, devs []PreparedDevice) error {
	for _, other := range s.cp.Claims {
		if other.UID == uid {
			continue
		}
		for _, a := range devs {
			for _, b := range other.Devices {
				if conflict(a, b) {
					return fmt.Errorf("device %s conflicts with device %s of claim %s/%s, which is prepared on this node", a.Device, b.Device, other.Namespace, other.Name)
				}
			}
		}
	}
	return nil
}

// realize creates the claim's MIG instances and directories, sets its GPUs'
// time-slices, starts its MPS control daemon and writes its CDI spec. It returns the
// claim's completed record as JSON (the spec's annotation).
func (s *state) realize(pc *PreparedClaim) ([]byte, error) {
	for k := range pc.Devices {
		d := &pc.Devices[k]
		if d.MIG == nil {
			if s.dynamic {
				for _, g := range d.GPUs {
					if err := s.mig.setMode(g, false); err != nil {
						return nil, err
					}
				}
			}
			continue
		}
		if err := s.createMIG(d); err != nil {
			return nil, err
		}
		if err := s.hook.at(PointMIGReady); err != nil {
			return nil, err
		}
	}
	if err := s.applyTimeSlices(pc); err != nil {
		return nil, err
	}
	if slices.ContainsFunc(pc.Devices, func(d PreparedDevice) bool { return d.CDI.MPS != nil }) {
		s.takeSpareMPSDir(string(pc.UID))
	}
	for _, d := range pc.Devices {
		if m := d.CDI.MPS; m != nil {
			if _, err := s.makeMPSDirs(m.PipeDir, m.LogDir, m.ShmDir); err != nil {
				return nil, err
			}
		}
		if dir := d.CDI.CacheDir; dir != "" {
			if err := os.MkdirAll(dir, 0o750); err != nil {
				return nil, fmt.Errorf("creating %s: %w", dir, err)
			}
		}
	}
	if err := s.startMPS(pc); err != nil {
		return nil, err
	}
	rec, err := s.writeSpec(pc)
	if err != nil {
		return nil, err
	}
	return rec, s.hook.at(PointCDIWritten)
}

func (s *state) createMIG(d *PreparedDevice) error {
	if s.dynamic {
		if err := s.mig.setMode(d.MIG.Parent, true); err != nil {
			return err
		}
	}
	c, err := s.mig.create(d.MIG)
	if err != nil {
		return err
	}
	g := s.planner.inv.GPU(d.MIG.Parent)
	giMinor, ciMinor, err := s.planner.node.MIGCapMinors(g.Minor, c.GI, c.CI)
	if err != nil {
		return fmt.Errorf("GPU %d: MIG capability devices: %w", g.Index, err)
	}
	d.CDI.MIG = &cdi.MIG{Parent: cdi.GPU{Index: g.Index, Minor: g.Minor, UUID: g.UUID}, GI: c.GI, CI: c.CI, UUID: c.UUID, GICapMinor: giMinor, CICapMinor: ciMinor}
	return nil
}

// writeSpec writes the claim's CDI spec, annotated with the completed record, and
// returns that record.
func (s *state) writeSpec(pc *PreparedClaim) ([]byte, error) {
	rec := *pc
	rec.State = PrepareCompleted
	raw, err := json.Marshal(&rec)
	if err != nil {
		return nil, err
	}
	devs := make([]cdi.Device, len(pc.Devices))
	for k, d := range pc.Devices {
		devs[k] = d.CDI
	}
	if _, err := s.specs.Write(string(pc.UID), cmp.Or(pc.PodClaimName, pc.Name), s.planner.node, devs, raw); err != nil {
		return nil, err
	}
	return raw, nil
}

// rollback undoes whatever part of a prepare happened and forgets the claim.
func (s *state) rollback(pc *PreparedClaim) error {
	if err := s.teardown(pc); err != nil {
		return fmt.Errorf("rolling back claim %s/%s: %w", pc.Namespace, pc.Name, err)
	}
	delete(s.cp.Claims, pc.UID)
	return s.forget(pc.UID)
}

// teardown removes the claim's CDI spec, MPS control daemon, MIG instances, time-slices
// and directories.
func (s *state) teardown(pc *PreparedClaim) error {
	if err := s.specs.Remove(string(pc.UID)); err != nil {
		return err
	}
	if err := s.hook.at(PointCDIRemoved); err != nil {
		return err
	}
	if err := s.stopMPS(pc.UID); err != nil {
		return err
	}
	pc.MPS = nil
	if err := s.hook.at(PointMPSStopped); err != nil {
		return err
	}
	for _, d := range pc.Devices {
		if d.MIG != nil {
			if err := s.mig.destroy(d.MIG); err != nil {
				return err
			}
		}
	}
	if err := s.hook.at(PointMIGDestroyed); err != nil {
		return err
	}
	if err := s.releaseTimeSlices(pc); err != nil {
		return err
	}
	return s.removeClaimDirs(pc.UID)
}

// removeClaimDirs removes the claim's MPS and HAMi-core directories, its shm tmpfs
// unmounted first (its MPS control daemon must have stopped). A tmpfs that cannot be
// unmounted is an error, and its directories stay for the retry.
func (s *state) removeClaimDirs(uid types.UID) error {
	if err := unmountMPSShm(s.planner.mpsShmDir(string(uid))); err != nil {
		return fmt.Errorf("claim %s: %w", uid, err)
	}
	for _, dir := range []string{s.planner.mpsDir(string(uid)), s.planner.cacheDir(string(uid))} {
		if err := os.RemoveAll(dir); err != nil {
			s.logger.Error(err, "Removing a claim's directory", "claimUID", uid, "dir", dir)
		}
	}
	return nil
}

// unprepare undoes prepare; an unknown claim is already unprepared.
func (s *state) unprepare(uid types.UID) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if err := s.reload(); err != nil {
		return err
	}
	pc := s.cp.Claims[uid]
	if pc == nil {
		if err := s.stopMPS(uid); err != nil {
			return err
		}
		if err := s.removeClaimDirs(uid); err != nil {
			return err
		}
		return s.specs.Remove(string(uid))
	}
	pc.State = UnprepareStarted
	if err := s.record(pc, PointUnprepareStartedTorn); err != nil {
		return err
	}
	if err := s.hook.at(PointUnprepareStarted); err != nil {
		return err
	}
	if err := s.teardown(pc); err != nil {
		return err
	}
	delete(s.cp.Claims, uid)
	if err := s.forget(uid); err != nil {
		return err
	}
	if err := s.makeSpareMPSDirs(); err != nil {
		s.logger.Error(err, "Creating spare MPS directories")
	}
	return s.hook.at(PointUnprepareCompleted)
}

// newStateFor builds the node state; recover must run before use.
func newStateFor(cfg Config, inv *driver.Inventory, pool *driver.Pool, logger klog.Logger) (*state, error) {
	bootPath := cfg.BootIDPath
	if bootPath == "" {
		bootPath = "/proc/sys/kernel/random/boot_id"
	}
	bootID, err := readBootID(bootPath)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.CheckpointDir, 0o750); err != nil {
		return nil, err
	}
	specs, err := cdi.NewSpecs(cfg.CDIRoot)
	if err != nil {
		return nil, err
	}
	gpuParts, err := cdi.NewDriver(cdi.DriverOptions{Root: cfg.DriverRoot, ContainerRoot: cfg.ContainerDriverRoot,
		NVML: cfg.Backend.NVML, HookPath: cfg.CDIHookPath, Simulated: cfg.Backend.Simulated, Logger: logger})
	if err != nil {
		return nil, err
	}
	node := cdi.Node{DriverRoot: cfg.DriverRoot, ContainerDriverRoot: cfg.ContainerDriverRoot, VGPULibrary: cfg.VGPULibrary, Driver: gpuParts}
	tools := cmp.Or(cfg.ContainerDriverRoot, cfg.DriverRoot)
	mps, timeSlicer := cfg.MPS, cfg.TimeSlicer
	if mps == nil {
		mps = MPSProcess{Binary: filepath.Join(tools, "usr/bin/nvidia-cuda-mps-control")}
	}
	if timeSlicer == nil {
		timeSlicer = NvidiaSMI{Binary: filepath.Join(tools, "usr/bin/nvidia-smi")}
	}
	strategy := cfg.Render.MIG
	return &state{
		lockPath:   filepath.Join(cfg.CheckpointDir, "gpudra.lock"),
		store:      newCheckpointStore(cfg.CheckpointDir, cfg.Hook, logger),
		bootID:     bootID,
		specs:      specs,
		planner:    newPlanner(cfg.NodeName, inv, pool, node, cfg.CheckpointDir),
		mig:        migInstances{backend: cfg.Backend, inv: inv, hook: cfg.Hook},
		dynamic:    strategy == driver.MIGDynamic,
		mps:        mps,
		timeSlicer: timeSlicer,
		hook:       cfg.Hook,
		logger:     logger,
		mountShm:   mountMPSShm,
	}, nil
}

package kubeletplugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/kubeletplugin/checkpoint"
	"github.com/gpudra/gpudra/kubeletplugin/internal/hook"
	"github.com/gpudra/gpudra/kubeletplugin/mps"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// Hook is called at each named point of prepare and unprepare. Tests use it to inject
// crashes (panic, then start a fresh plugin on the same directories) or failures.
type Hook = hook.Hook

// The points at which Hook is called, in the order they are reached. The ...Torn
// points are reached with half of a journal record written (as when the plugin is
// killed in the middle of the write).
const (
	PointPrepareStartedTorn   = "prepare-started-torn"   // half the prepared.PrepareStarted record in the journal
	PointPrepareStarted       = "prepare-started"        // checkpoint says prepared.PrepareStarted
	PointMIGInstanceCreated   = "mig-instance-created"   // GPU instance exists, compute instance not yet
	PointMIGReady             = "mig-ready"              // GPU and compute instance exist
	PointMPSStarted           = "mps-started"            // the claim's MPS control daemon runs, not yet recorded
	PointCDIWritten           = "cdi-written"            // CDI spec on disk
	PointPrepareCompletedTorn = "prepare-completed-torn" // half the prepared.PrepareCompleted record in the journal
	PointPrepareCompleted     = "prepare-completed"      // checkpoint says prepared.PrepareCompleted
	PointUnprepareStartedTorn = "unprepare-started-torn" // half the prepared.UnprepareStarted record in the journal
	PointUnprepareStarted     = "unprepare-started"      // checkpoint says prepared.UnprepareStarted
	PointCDIRemoved           = "cdi-removed"
	PointMPSStopped           = "mps-stopped" // the claim's MPS control daemon (if any) is gone
	PointMIGDestroyed         = "mig-destroyed"
	PointTimeSlicesLeftTorn   = "time-slices-left-torn" // half the record of the claim with only its time-slices left in the journal
	PointTimeSlicesLeft       = "time-slices-left"      // checkpoint says the claim has only its GPUs' time-slices to give back
	PointClaimRemovedTorn     = "claim-removed-torn"    // half the record removing the claim in the journal
	PointUnprepareCompleted   = "unprepare-completed"   // claim gone from the checkpoint

	// PointCheckpointCompacted is reached when the journal has grown and its claims are
	// in a new checkpoint file, before a new journal replaces the old one; at start-up
	// (recovery compacts) or after any record.
	PointCheckpointCompacted = checkpoint.PointCompacted
)

// PreparePoints and UnpreparePoints list the hook points of each operation (an
// unprepare reaches the TimeSlicePoints only for a claim that set time-slices);
// CompactionPoints those of a compaction.
var (
	PreparePoints = []string{PointPrepareStartedTorn, PointPrepareStarted, PointMIGInstanceCreated, PointMIGReady,
		PointMPSStarted, PointCDIWritten, PointPrepareCompletedTorn, PointPrepareCompleted}
	UnpreparePoints = []string{PointUnprepareStartedTorn, PointUnprepareStarted, PointCDIRemoved, PointMPSStopped,
		PointMIGDestroyed, PointTimeSlicesLeftTorn, PointTimeSlicesLeft, PointClaimRemovedTorn, PointUnprepareCompleted}
	TimeSlicePoints  = []string{PointTimeSlicesLeftTorn, PointTimeSlicesLeft}
	CompactionPoints = []string{PointCheckpointCompacted}
)

// state is the node's prepared claims: the checkpoint, the CDI specs, the MIG
// instances, the MPS control daemons and the GPUs' time-slices, kept consistent under a
// node-wide lock (a mutex and a file lock, so that two plugin instances during a
// rolling update never interleave). The kubelet plugin library does not serialise the
// kubelet's calls (Serialize(false)): each operation on a claim holds the claim's lock
// (claims) throughout, and the node's lock, taken after it, only for the steps that read
// or change the node, never while it waits for an MPS control daemon's pod or for
// nvidia-smi (but at start-up, when nothing else runs). Each change of a GPU's time-slice
// holds the GPU's lock (gpuLocks), taken after the claim's lock and before the node's.
type state struct {
	claims     claimLocks
	gpuLocks   keyedLocks[string] // by GPU UUID
	repairs    *repairs
	mu         sync.Mutex
	lockPath   string
	store      *checkpoint.Store
	cp         *checkpoint.Data
	bootID     string
	specs      *cdi.Specs
	planner    *planner
	mig        migInstances
	dynamic    bool        // MIG strategy dynamic: the plugin owns MIG mode and instances
	mps        *mpsManager // the claims' MPS control daemons and directories
	timeSlicer TimeSlicer
	hook       Hook
	logger     klog.Logger
	// Corruptions counts corrupt checkpoints set aside.
	corruptions int
	// repartitioning are the GPUs a MIG layout withdrew, whose devices prepare refuses.
	repartitioning repartitioning
}

// removeSpareMPSDirs removes the spare MPS directory trees when the plugin stops.
func (s *state) removeSpareMPSDirs() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mps.removeSpares()
}

// undoStart undoes what a plugin start that failed mounted (mpsManager.undoStartMounts),
// once the repairs, which could mount again, have stopped.
func (s *state) undoStart(mounted []string) {
	s.repairs.shutdown()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.mps.undoStartMounts(mounted); err != nil {
		s.logger.Error(err, "Unmounting what the failed start mounted")
	}
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

// lockLoaded takes the node's lock and reloads the checkpoint under it (another plugin
// instance may have changed it); the caller defers the unlock it returns.
func (s *state) lockLoaded() (func(), error) {
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	if err := s.reload(); err != nil {
		unlock()
		return nil, err
	}
	return unlock, nil
}

// record appends the claim's record, as it is now, to the checkpoint journal.
func (s *state) record(pc *prepared.Claim, torn string) error {
	return s.store.Put(s.cp, pc, torn)
}

// forget appends to the checkpoint journal that the claim is gone (deleted from s.cp).
func (s *state) forget(uid types.UID) error {
	return s.store.Remove(s.cp, uid, PointClaimRemovedTorn)
}

// reload re-reads the checkpoint and its journal when another plugin instance (a
// rolling update) has written them since this one last did, or when this one could not
// finish a write.
func (s *state) reload() error {
	if s.store.Unchanged() {
		return nil
	}
	cp, err := s.store.Load()
	if err != nil {
		return err
	}
	s.cp = cp
	return nil
}

func results(pc *prepared.Claim) []kubeletplugin.Device {
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

// prepareClaim prepares the claim (prepare), then, after the node's lock is released,
// sets its GPUs' time-slices (nvidia-smi) and waits for an MPS control daemon that starts
// in the background (a pod), both within ctx, holding the claim's lock throughout: other
// claims' prepares and unprepares go on meanwhile. GPUs whose time-slices an earlier
// unprepare or rollback of the claim left to give back get them back first, likewise.
// batch is the kubelet's call that claim is in: the claims of one pod for this driver that
// were not prepared yet.
func (s *state) prepareClaim(ctx context.Context, claim *resourceapi.ResourceClaim, batch []*resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	if err := checkClaimUID(claim.UID); err != nil {
		return nil, err
	}
	defer s.claims.lock(claim.UID)()
	devs, waitMPS, pending, err := s.prepare(claim, batch)
	if errors.Is(err, errTimeSlicesLeft) {
		if err = s.finishRelease(ctx, claim.UID); err == nil {
			devs, waitMPS, pending, err = s.prepare(claim, batch)
		}
	}
	if err != nil {
		return nil, err
	}
	if pending != nil {
		if err := s.setTimeSlices(ctx, pending); err != nil {
			return nil, err
		}
	}
	return devs, s.mps.waitReady(ctx, waitMPS)
}

// prepare makes the claim's devices usable and returns them with their CDI ids, and the
// time-slices left to set once the node's lock is released. It is idempotent: a prepared
// claim returns the same devices. A prepare that fails undoes what it did, and only that
// (made). A claim whose earlier prepare or unprepare did not finish is rolled back
// first; errTimeSlicesLeft says its GPUs' time-slices are left to give back
// (finishRelease) before it is prepared.
func (s *state) prepare(claim *resourceapi.ResourceClaim, batch []*resourceapi.ResourceClaim) (devs []kubeletplugin.Device, waitMPS string, pending *pendingTimeSlices, err error) {
	unlock, err := s.lockLoaded()
	if err != nil {
		return nil, "", nil, err
	}
	defer unlock()
	uid := claim.UID
	if pc := s.cp.Claims[uid]; pc != nil {
		if pc.State == prepared.PrepareCompleted {
			if !s.specs.Exists(string(uid)) {
				if _, err := s.writeSpec(pc); err != nil {
					return nil, "", nil, err
				}
			}
			// Its MPS control daemon may have died (with an earlier plugin container).
			before := pc.MPS
			if err := s.mps.restore(pc, false); err != nil {
				return nil, "", nil, err
			}
			if pc.MPS != before {
				if err := s.record(pc, PointPrepareCompletedTorn); err != nil {
					return nil, "", nil, err
				}
			}
			return results(pc), s.mps.waitFor(pc), nil, nil
		}
		if left, err := s.rollback(pc, nil); err != nil {
			return nil, "", nil, err
		} else if left {
			return nil, "", nil, errTimeSlicesLeft
		}
	}
	reads := &claimReads{api: s.planner.api, claim: claim}
	planned, err := s.planner.plan(claim, reads)
	if err != nil {
		return nil, "", nil, err
	}
	if err := s.numberHAMi(claim, planned, reads, batch); err != nil {
		return nil, "", nil, err
	}
	if err := s.repartitioning.refuse(planned); err != nil {
		return nil, "", nil, err
	}
	if err := s.checkExclusive(uid, planned); err != nil {
		return nil, "", nil, err
	}
	if err := s.checkMIGPlacements(planned); err != nil {
		return nil, "", nil, err
	}
	pc := &prepared.Claim{UID: uid, Namespace: claim.Namespace, Name: claim.Name, PodClaimName: claim.Annotations[resourceapi.PodResourceClaimAnnotation],
		State: prepared.PrepareStarted, Devices: planned}
	if err := s.checkTimeSlices(pc); err != nil {
		return nil, "", nil, err
	}
	s.cp.Claims[uid] = pc
	if err := s.record(pc, PointPrepareStartedTorn); err != nil {
		delete(s.cp.Claims, uid)
		return nil, "", nil, err
	}
	m := &made{}
	if err := s.hook.At(PointPrepareStarted); err != nil {
		return nil, "", nil, errors.Join(err, s.undo(pc, m))
	}
	rec, err := s.realize(pc, m)
	if err != nil {
		return nil, "", nil, errors.Join(err, s.undo(pc, m))
	}
	pc.State = prepared.PrepareCompleted
	// rec is pc as completed, as the CDI spec's annotation has it: marshaled once.
	if err := s.store.PutRecord(s.cp, rec, PointPrepareCompletedTorn); err != nil {
		pc.State = prepared.PrepareStarted
		return nil, "", nil, errors.Join(err, s.undo(pc, m))
	}
	if err := s.hook.At(PointPrepareCompleted); err != nil {
		return nil, "", nil, err
	}
	if want := timeSlices(pc); len(want) > 0 {
		pending = &pendingTimeSlices{uid: uid, ref: klog.KRef(pc.Namespace, pc.Name), want: want, made: m}
	}
	return results(pc), s.mps.waitFor(pc), pending, nil
}

// checkExclusive refuses devices that another claim prepared on this node holds.
func (s *state) checkExclusive(uid types.UID, devs []prepared.Device) error {
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

// checkMIGPlacements refuses MIG devices whose placement a GPU instance already
// occupies (made outside gpudra, as with nvidia-smi mig -cgi): creating the device's
// instance would fail, and that instance is not the claim's to destroy. It runs before
// prepared.PrepareStarted is recorded, so that an instance found at the placement of an
// interrupted prepare is the one that prepare created.
func (s *state) checkMIGPlacements(devs []prepared.Device) error {
	for _, d := range devs {
		mi := d.MIG
		if mi == nil {
			continue
		}
		e, err := s.mig.occupant(mi)
		if err != nil {
			return fmt.Errorf("device %s: %w", d.Device, err)
		}
		if e == nil {
			continue
		}
		profile := strconv.Itoa(e.giProfileID)
		for _, p := range s.planner.inv.GPU(mi.Parent).MIG.Profiles {
			if p.GIProfileID == e.giProfileID {
				profile = p.Name
			}
		}
		return fmt.Errorf("device %s: GPU %d: MIG %s at placement %d (size %d) overlaps an existing %s GPU instance at placement %d (size %d) that no claim prepared on this node holds; it is left alone: destroy it (nvidia-smi mig -dgi) to free the placement",
			d.Device, mi.Parent, mi.Profile, mi.Start, mi.Size, profile, e.start, e.size)
	}
	return nil
}

// made is what one prepare changed on the node's GPUs, so that its rollback undoes that
// and nothing else: a MIG instance that it did not create, or a time-slice that it did
// not set, is not the claim's. (What is named after the claim's UID, its CDI spec, MPS
// directories and daemon, is the claim's whoever made it.) A nil *made is everything the
// claim's record names: a recorded claim holds all of it.
type made struct {
	migDevices []int    // indices in the claim's Devices of the MIG instances it created
	timeSlices []string // UUIDs of the GPUs whose time-slice it set
}

func (m *made) createdMIG(device int) bool {
	return m == nil || slices.Contains(m.migDevices, device)
}

func (m *made) setTimeSlice(gpu string) bool {
	return m == nil || slices.Contains(m.timeSlices, gpu)
}

// realize creates the claim's MIG instances and directories, starts its MPS control
// daemon and writes its CDI spec, noting in m what it changed on the GPUs (its
// time-slices are set once the node's lock is released: setTimeSlices). It returns the claim's completed record as JSON (the spec's
// annotation).
func (s *state) realize(pc *prepared.Claim, m *made) ([]byte, error) {
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
		m.migDevices = append(m.migDevices, k)
		if err := s.hook.At(PointMIGReady); err != nil {
			return nil, err
		}
	}
	if err := makeVGPUFiles(pc); err != nil {
		return nil, err
	}
	if err := s.mps.prepare(pc); err != nil {
		return nil, err
	}
	rec, err := s.writeSpec(pc)
	if err != nil {
		return nil, err
	}
	return rec, s.hook.At(PointCDIWritten)
}

func (s *state) createMIG(d *prepared.Device) error {
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
func (s *state) writeSpec(pc *prepared.Claim) ([]byte, error) {
	rec := *pc
	rec.State = prepared.PrepareCompleted
	raw, err := checkpoint.MarshalClaim(&rec)
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
	var gpuParts *cdi.Driver // nvcdi's parts of NVIDIA GPUs' specs; none without NVML
	if cfg.Backend.NVML != nil {
		if gpuParts, err = cdi.NewDriver(cdi.DriverOptions{Root: cfg.DriverRoot, ContainerRoot: cfg.ContainerDriverRoot,
			NVML: cfg.Backend.NVML, HookPath: cfg.CDIHookPath, Simulated: cfg.Backend.Simulated, Logger: logger}); err != nil {
			return nil, err
		}
	}
	node := cdi.Node{DriverRoot: cfg.DriverRoot, ContainerDriverRoot: cfg.ContainerDriverRoot, VGPULibrary: cfg.VGPULibrary, Driver: gpuParts}
	tools := cmp.Or(cfg.ContainerDriverRoot, cfg.DriverRoot)
	daemons, timeSlicer := cfg.MPS, cfg.TimeSlicer
	if daemons == nil {
		daemons = mps.Process{Binary: filepath.Join(tools, "usr/bin/nvidia-cuda-mps-control")}
	}
	if timeSlicer == nil {
		timeSlicer = NvidiaSMI{Binary: filepath.Join(tools, "usr/bin/nvidia-smi")}
	}
	strategy := cfg.Render.MIG
	planner := newPlanner(cfg.NodeName, inv, pool, node, cfg.CheckpointDir)
	planner.api = newAPIReader(cfg.Client)
	planner.priorities = newPodPriorities(cfg.SharePriorityThreshold, planner.api, logger)
	st := &state{
		lockPath:   filepath.Join(cfg.CheckpointDir, "gpudra.lock"),
		store:      checkpoint.New(cfg.CheckpointDir, cfg.Hook, logger),
		bootID:     bootID,
		specs:      specs,
		planner:    planner,
		mig:        migInstances{backend: cfg.Backend, inv: inv, hook: cfg.Hook, adopt: strategy != driver.MIGDynamic},
		dynamic:    strategy == driver.MIGDynamic,
		mps:        newMPSManager(daemons, cfg.CheckpointDir, cfg.Hook, logger),
		timeSlicer: timeSlicer,
		hook:       cfg.Hook,
		logger:     logger,
	}
	st.repairs = newRepairs(st, cfg)
	return st, nil
}

// readBootID reads the kernel's boot id (/proc/sys/kernel/random/boot_id by default).
func readBootID(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the boot id: %w", err)
	}
	return strings.TrimSpace(string(raw)), nil
}

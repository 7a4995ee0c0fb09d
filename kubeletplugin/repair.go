package kubeletplugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/kubeletplugin/mps"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// The parts of a claim that a repair brings back or finishes: the part label of
// gpudra_plugin_repair_failures_total.
const (
	partMIG        = "mig-instance"
	partTimeSlice  = "time-slice"
	partMPS        = "mps-daemon"
	partSpec       = "cdi-spec"
	partCheckpoint = "checkpoint"
	partRollback   = "rollback"
	partUnprepare  = "unprepare"
)

// partNames say what a part is, for logs and Events.
var partNames = map[string]string{
	partMIG:        "re-creating its MIG instance",
	partTimeSlice:  "setting its GPUs' time-slices",
	partMPS:        "restarting its MPS control daemon",
	partSpec:       "writing its CDI spec",
	partCheckpoint: "recording it in the checkpoint",
	partRollback:   "rolling back its interrupted prepare",
	partUnprepare:  "finishing its unprepare",
}

// repairs does in the background what a claim needs and did not get at once: what
// start-up recovery could not restore for a prepared claim (its MIG instances, CDI spec,
// time-slices or MPS control daemon), an MPS control daemon that has exited
// (checkDaemons), a rollback or an unprepare that could not finish. Each claim is tried
// again with exponential back-off (Config.RepairBackoff, doubling up to 5 min) until it
// works or the claim is unprepared; a prepared claim keeps everything it holds
// meanwhile. Each failure is logged, counted (gpudra_plugin_repair_failures_total) and,
// with a Kubernetes client, reported in an Event on the claim.
type repairs struct {
	s       *state
	backoff wait.Backoff
	// every is how often checkDaemons runs, for MPS control daemons that are not pods.
	every  time.Duration
	client kubernetes.Interface

	mu          sync.Mutex
	due         map[types.UID]*repair
	metrics     *metrics
	broadcaster events.EventBroadcaster
	events      events.EventRecorder
	kick        chan struct{}
	stop        context.CancelFunc
	done        chan struct{}
}

// repair is one claim's pending repair.
type repair struct {
	ref      klog.ObjectRef
	part     string
	backoff  wait.Backoff
	at       time.Time
	failures int
	// unreported is the Warning Event of a failure before start (at start-up recovery),
	// recorded once Events are.
	unreported string
}

func newRepairs(s *state, cfg Config) *repairs {
	return &repairs{
		s: s,
		backoff: wait.Backoff{Duration: cmp.Or(cfg.RepairBackoff, time.Second), Factor: 2, Jitter: 0.1,
			Steps: math.MaxInt32, Cap: 5 * time.Minute},
		every:  cmp.Or(cfg.MPSCheckInterval, 10*time.Second),
		client: cfg.BackgroundClient,
		due:    map[types.UID]*repair{},
		kick:   make(chan struct{}, 1),
	}
}

// start runs the repairs (those start-up recovery scheduled first) until shutdown.
func (r *repairs) start(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	r.mu.Lock()
	if r.client != nil {
		r.broadcaster = events.NewBroadcaster(&events.EventSinkImpl{Interface: r.client.EventsV1()})
		if err := r.broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
			r.s.logger.Error(err, "Recording Events on claims")
		}
		r.events = r.broadcaster.NewRecorder(scheme.Scheme, api.DriverName+"/kubelet-plugin")
		for uid, rp := range r.due {
			if rp.unreported != "" {
				r.event(rp.ref, uid, corev1.EventTypeWarning, "RepairFailed", rp.part, "%s", rp.unreported)
				rp.unreported = ""
			}
		}
	}
	r.stop, r.done = cancel, make(chan struct{})
	r.mu.Unlock()
	go r.run(ctx)
}

// shutdown stops the repairs and waits until they have stopped.
func (r *repairs) shutdown() {
	r.mu.Lock()
	stop, done, b := r.stop, r.done, r.broadcaster
	r.mu.Unlock()
	if stop == nil {
		return
	}
	stop()
	<-done
	if b != nil {
		b.Shutdown()
	}
}

// failed reports that part of the claim failed and schedules its repair after the
// claim's next back-off step.
func (r *repairs) failed(uid types.UID, ref klog.ObjectRef, part string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rp := r.entry(uid, ref, part)
	rp.failures++
	delay := rp.backoff.Step()
	rp.at = time.Now().Add(delay)
	r.s.logger.Error(err, "Claim not repaired: trying again in the background", "claim", ref, "claimUID", uid,
		"part", part, "failures", rp.failures, "retryIn", delay.Round(time.Millisecond))
	if r.metrics != nil {
		r.metrics.repairFailures.WithLabelValues(part).Inc()
	}
	note := fmt.Sprintf("%s on node %s failed (%d times; next try in %s): %v",
		partNames[part], r.s.planner.nodeName, rp.failures, delay.Round(time.Second), err)
	if r.events == nil {
		rp.unreported = note
	}
	r.event(ref, uid, corev1.EventTypeWarning, "RepairFailed", part, "%s", note)
	r.changed()
}

// add schedules the claim's repair at once: work left that is not a failure (a daemon
// that has exited, one whose pod is still stopping).
func (r *repairs) add(uid types.UID, ref klog.ObjectRef, part string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rp := r.entry(uid, ref, part)
	rp.at = time.Now()
	r.s.logger.V(2).Info("Repair of a claim scheduled", "claim", ref, "claimUID", uid, "part", part)
	r.changed()
}

// pending reports whether the claim's repair is scheduled.
func (r *repairs) pending(uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.due[uid] != nil
}

func (r *repairs) entry(uid types.UID, ref klog.ObjectRef, part string) *repair {
	rp := r.due[uid]
	if rp == nil {
		rp = &repair{ref: ref, backoff: r.backoff}
		r.due[uid] = rp
	}
	if ref.Name != "" {
		rp.ref = ref
	}
	rp.part = part
	return rp
}

// changed updates the gauge and wakes the loop; r.mu is held.
func (r *repairs) changed() {
	if r.metrics != nil {
		r.metrics.unrepairedClaims.Set(float64(len(r.due)))
	}
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// event records an Event on the claim, when there is a client and a claim name; r.mu is
// held.
func (r *repairs) event(ref klog.ObjectRef, uid types.UID, kind, reason, part, note string, args ...any) {
	action := "Restore"
	switch part {
	case partRollback:
		action = "Rollback"
	case partUnprepare:
		action = "Unprepare"
	}
	r.eventAction(ref, uid, kind, reason, action, note, args...)
}

// eventAction records an Event on a claim with the given action; r.mu is held.
func (r *repairs) eventAction(ref klog.ObjectRef, uid types.UID, kind, reason, action, note string, args ...any) {
	if r.events == nil || ref.Name == "" {
		return
	}
	claim := &corev1.ObjectReference{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim", Namespace: ref.Namespace, Name: ref.Name, UID: uid}
	msg := fmt.Sprintf(note, args...)
	if len(msg) > 1000 { // an Event's note holds at most 1 kB
		msg = msg[:997] + "..."
	}
	r.events.Eventf(claim, nil, kind, reason, action, "%s", msg)
}

func (r *repairs) run(ctx context.Context) {
	defer close(r.done)
	var check <-chan time.Time
	if r.s.mps.pollsDaemons() {
		t := time.NewTicker(r.every)
		defer t.Stop()
		check = t.C
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		timer.Reset(r.untilNext())
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-check:
			r.checkDaemons()
		case <-timer.C:
			r.runDue(ctx)
		}
	}
}

// untilNext is the time until the next repair is due.
func (r *repairs) untilNext() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	next := time.Hour
	for _, rp := range r.due {
		next = min(next, time.Until(rp.at))
	}
	return max(next, 0)
}

// runDue tries the repairs that are due.
func (r *repairs) runDue(ctx context.Context) {
	r.mu.Lock()
	now := time.Now()
	var uids []types.UID
	for uid, rp := range r.due {
		if !rp.at.After(now) {
			uids = append(uids, uid)
		}
	}
	r.mu.Unlock()
	for _, uid := range uids {
		if ctx.Err() != nil {
			return
		}
		part, err := r.s.repair(ctx, uid)
		r.mu.Lock()
		rp := r.due[uid]
		r.mu.Unlock()
		if rp == nil {
			continue
		}
		switch {
		case errors.Is(err, mps.ErrDaemonGoing):
			r.mu.Lock()
			rp.at = time.Now().Add(rp.backoff.Step())
			r.mu.Unlock()
		case err != nil:
			r.failed(uid, rp.ref, cmp.Or(part, rp.part), err)
		default:
			r.mu.Lock()
			delete(r.due, uid)
			if rp.failures > 0 {
				r.s.logger.Info("Claim repaired", "claim", rp.ref, "claimUID", uid, "part", rp.part, "failures", rp.failures)
				r.event(rp.ref, uid, corev1.EventTypeNormal, "Repaired", rp.part, "%s on node %s succeeded after %d failures",
					partNames[rp.part], r.s.planner.nodeName, rp.failures)
			}
			r.changed()
			r.mu.Unlock()
		}
	}
}

// checkDaemons schedules the repair of the prepared claims whose MPS control daemon has
// exited (daemons the plugin runs as processes outlive it, and die apart from it: with
// an earlier plugin's container during a rolling update, or on their own).
func (r *repairs) checkDaemons() {
	for _, pc := range r.s.exitedDaemons() {
		if r.pending(pc.UID) {
			continue
		}
		ref := klog.KRef(pc.Namespace, pc.Name)
		r.s.logger.Info("The MPS control daemon of a prepared claim has exited: restarting it", "claim", ref, "claimUID", pc.UID)
		r.add(pc.UID, ref, partMPS)
	}
}

// repair does what the claim's repair is for, holding its lock: a prepared claim is
// restored (restore), its time-slices set outside the node's lock; one whose unprepare or
// prepare was interrupted is unprepared or rolled back, the GPUs' time-slices it left
// given back outside the node's lock; a claim the checkpoint does not know has its
// leftovers removed once its daemon has gone. On failure part says what failed.
func (s *state) repair(ctx context.Context, uid types.UID) (part string, err error) {
	defer s.claims.lock(uid)()
	next, part, err := s.repairLocked(uid)
	switch {
	case err != nil:
		return part, err
	case next == repairUnprepare:
		return partUnprepare, s.unprepare(ctx, uid)
	case next == repairTimeSlicesLeft:
		return partRollback, s.finishRelease(ctx, uid)
	case next == repairTimeSlices:
		return partTimeSlice, s.restoreTimeSlices(ctx, uid)
	}
	return "", nil
}

// repairNext is what a repair does once the node's lock is released.
type repairNext int

const (
	repairDone           repairNext = iota
	repairUnprepare                 // unprepare the claim
	repairTimeSlicesLeft            // give back the time-slices its rollback left (finishRelease)
	repairTimeSlices                // set the prepared claim's time-slices (restoreTimeSlices)
)

// repairLocked is repair's part under the node's lock.
func (s *state) repairLocked(uid types.UID) (next repairNext, part string, err error) {
	unlock, err := s.lockLoaded()
	if err != nil {
		return repairDone, partCheckpoint, err
	}
	defer unlock()
	pc := s.cp.Claims[uid]
	switch {
	case pc == nil || pc.State == prepared.UnprepareStarted:
		return repairUnprepare, "", nil
	case pc.State == prepared.PrepareCompleted:
		part, err := s.restore(pc, true)
		// What was restored (a re-created MIG instance's ids, a daemon's pid) is recorded
		// even when a later part failed.
		if rerr := s.record(pc, ""); rerr != nil && err == nil {
			part, err = partCheckpoint, rerr
		}
		if err != nil {
			return repairDone, part, err
		}
		return repairTimeSlices, "", nil
	default:
		if left, err := s.rollback(pc, nil); err != nil || !left {
			return repairDone, partRollback, err
		}
		return repairTimeSlicesLeft, "", nil
	}
}

// exitedDaemons are the prepared claims whose MPS control daemon does not run.
func (s *state) exitedDaemons() []prepared.Claim {
	type daemon struct {
		pc   prepared.Claim
		pipe string
	}
	var daemons []daemon
	s.mu.Lock()
	if s.cp != nil {
		for _, pc := range s.cp.Claims {
			if pc.State == prepared.PrepareCompleted && pc.MPS != nil {
				daemons = append(daemons, daemon{prepared.Claim{UID: pc.UID, Namespace: pc.Namespace, Name: pc.Name}, pc.MPS.PipeDir})
			}
		}
	}
	s.mu.Unlock()
	var out []prepared.Claim
	for _, d := range daemons {
		if running, err := s.mps.running(d.pipe); err == nil && !running {
			out = append(out, d.pc)
		}
	}
	return out
}

// claimsEvent records an Event on each prepared claim that uses GPU gpu (a MIG device's
// parent, each GPU of a group), so that `kubectl describe resourceclaim` shows what happened
// to the GPU under it.
func (r *repairs) claimsEvent(gpu int, kind, reason, action, note string, args ...any) {
	type target struct {
		ref klog.ObjectRef
		uid types.UID
	}
	var targets []target
	r.s.mu.Lock()
	if r.s.cp != nil {
		for uid, c := range r.s.cp.Claims {
			if c.State != prepared.PrepareCompleted {
				continue
			}
			for _, d := range c.Devices {
				if slices.Contains(d.GPUs, gpu) {
					targets = append(targets, target{klog.KRef(c.Namespace, c.Name), uid})
					break
				}
			}
		}
	}
	r.s.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range targets {
		r.eventAction(t.ref, t.uid, kind, reason, action, note, args...)
	}
}

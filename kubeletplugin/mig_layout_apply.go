package kubeletplugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/miglayout"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// gpuLayout is a GPU's layout: its MIG mode and the instances to make, placed.
type gpuLayout struct {
	gpu       *driver.GPU
	enabled   bool
	profiles  []string
	instances []prepared.MIGInstance
}

// layoutChange is a GPU the layout repartitions, with its layout before.
type layoutChange struct {
	plan   gpuLayout
	before migView
}

// applyMIGLayout partitions each GPU the layout selects as it says, except the GPUs that
// claims use (pending): claims prepared on the node, and claims allocated on the node's
// devices but not prepared yet, read from the API server when a GPU is to change (the
// layout is not applied when they cannot be read). The GPUs to change are withdrawn from
// the node's ResourceSlices and the claims read again before any is repartitioned
// (withdrawForLayout). A layout that names GPUs the node lacks, or that some GPU cannot
// hold, is refused whole, nothing changed. When repartitioning a GPU fails, the GPUs
// changed before it are restored to their previous layout, and the error says which GPUs
// have which layout.
func (d *Driver) applyMIGLayout(ctx context.Context, name string, entries []miglayout.Entry) (migLayoutResult, error) {
	res, changes, unlock, err := d.planMIGLayout(ctx, name, entries)
	if err != nil {
		return res, err
	}
	if len(changes) == 0 {
		return d.realizeMIGLayout(ctx, name, res, nil, nil, unlock)
	}
	// Read outside the node lock: a List may take as long as the API server does.
	unlock()
	allocated, err := d.allocatedGPUs(ctx)
	if err != nil {
		return res, fmt.Errorf("MIG layout %q is not applied: reading the ResourceClaims allocated on the node's devices: %w", name, err)
	}
	if res, changes, unlock, err = d.planMIGLayout(ctx, name, entries); err != nil {
		return res, err
	}
	users := d.state.layoutUsers(allocated)
	idle := map[int]bool{}
	for _, c := range changes {
		if g := c.plan.gpu.Index; len(users[g]) == 0 {
			idle[g] = true
		}
	}
	if len(idle) == 0 {
		return d.realizeMIGLayout(ctx, name, res, changes, users, unlock)
	}
	// Withdrawn under the lock: from here on prepare refuses the GPUs' devices.
	d.state.repartitioning.start(name, idle)
	unlock()
	late, err := d.withdrawForLayout(ctx, name, idle)
	if err != nil {
		return res, err
	}
	if res, changes, unlock, err = d.planMIGLayout(ctx, name, entries); err != nil {
		d.giveBackWithdrawn(ctx)
		return res, err
	}
	// The GPUs that had claims stay pending with them; the withdrawn ones have none
	// (withdrawForLayout gave up otherwise, and prepare refuses their devices).
	users = d.state.layoutUsers(allocated)
	mergeClaims(users, late)
	for _, c := range changes {
		if g := c.plan.gpu.Index; !idle[g] && len(users[g]) == 0 {
			// Its claims went since it was looked at: it is not withdrawn, so it waits
			// for the next pass (pending with no claims).
			users[g] = []string{}
		}
	}
	return d.realizeMIGLayout(ctx, name, res, changes, users, unlock)
}

// layoutUsers are the GPUs that prepared claims, or the allocated claims read from the
// API server, use, with the claims; s is locked.
func (s *state) layoutUsers(allocated map[int][]string) map[int][]string {
	users := s.gpuUsers()
	mergeClaims(users, allocated)
	return users
}

// mergeClaims adds the claims of more to users, each GPU's once and sorted.
func mergeClaims(users, more map[int][]string) {
	for gpu, claims := range more {
		for _, c := range claims {
			if !slices.Contains(users[gpu], c) {
				users[gpu] = append(users[gpu], c)
			}
		}
		slices.Sort(users[gpu])
	}
}

// planMIGLayout places the layout on the node's GPUs and reads which of them it changes.
// On success the state is locked, and unlock unlocks it.
func (d *Driver) planMIGLayout(ctx context.Context, name string, entries []miglayout.Entry) (res migLayoutResult, changes []layoutChange, unlock func(), err error) {
	res = migLayoutResult{layouts: map[int][]string{}, pending: map[int][]string{}, views: map[int]migView{}}
	s := d.state
	if unlock, err = s.lock(); err != nil {
		return res, nil, nil, err
	}
	fail := func(err error) (migLayoutResult, []layoutChange, func(), error) {
		unlock()
		return res, nil, nil, err
	}
	inv := s.planner.inv
	indexes := make([]int, 0, len(inv.GPUs))
	for _, g := range inv.GPUs {
		indexes = append(indexes, g.Index)
	}
	if err := miglayout.CheckIndexes(name, entries, indexes); err != nil {
		return fail(fmt.Errorf("MIG layout %q is refused and nothing was changed: %w", name, err))
	}
	var plans []gpuLayout
	var refused, models []string
	for k := range inv.GPUs {
		g := &inv.GPUs[k]
		sel, err := d.layoutGPU(g)
		if err != nil {
			return fail(fmt.Errorf("MIG layout %q is not applied: %w", name, err))
		}
		e, ok := miglayout.Select(entries, sel)
		if !ok {
			if m := fmt.Sprintf("%s (0x%08X)", sel.ProductName, sel.PCIDeviceID); !slices.Contains(models, m) {
				models = append(models, m)
			}
			continue
		}
		p, err := planGPULayout(g, e)
		if err != nil {
			refused = append(refused, err.Error())
			continue
		}
		plans = append(plans, p)
	}
	if len(refused) > 0 {
		return fail(fmt.Errorf("MIG layout %q is refused and nothing was changed: %s", name, strings.Join(refused, "; ")))
	}
	if len(plans) == 0 && len(inv.GPUs) > 0 {
		return fail(fmt.Errorf("MIG layout %q selects none of the node's GPUs and nothing was changed: no entry's devices and device-filter match its GPUs, %s",
			name, strings.Join(models, ", ")))
	}
	for _, p := range plans {
		g := p.gpu
		res.layouts[g.Index] = p.profiles
		if g.MIG == nil { // not MIG-capable, and the layout leaves MIG off
			continue
		}
		current, err := readMIGView(d.cfg.Backend, g)
		if err != nil {
			return fail(fmt.Errorf("MIG layout %q is not applied: %w", name, err))
		}
		if current.has(p) {
			if g.MIG.Enabled != current.enabled || !slices.Equal(instanceNames(g.MIG.Instances), instanceNames(current.instances)) {
				res.views[g.Index] = current
			}
			continue
		}
		changes = append(changes, layoutChange{plan: p, before: current})
	}
	return res, changes, unlock, nil
}

// realizeMIGLayout makes the changes whose GPUs no claim uses (users, as layoutUsers
// reads them), gives the withdrawn GPUs back and republishes the node's devices; the
// state is locked, and realizeMIGLayout unlocks it.
func (d *Driver) realizeMIGLayout(ctx context.Context, name string, res migLayoutResult, changes []layoutChange, users map[int][]string, unlock func()) (migLayoutResult, error) {
	logger := klog.FromContext(ctx)
	s := d.state
	if users == nil {
		users = s.gpuUsers()
	}
	var done []layoutChange
	var applyErr error
	for _, c := range changes {
		g := c.plan.gpu
		if claims, ok := users[g.Index]; ok {
			res.pending[g.Index] = claims
			continue
		}
		logger.Info("Applying the MIG layout to a GPU", "layout", name, "gpu", g.Index,
			"before", instanceNames(c.before.instances), "migEnabled", c.plan.enabled, "profiles", c.plan.profiles)
		done = append(done, c)
		if err := s.realizeGPULayout(c.plan); err != nil {
			applyErr = s.rollBackLayout(ctx, name, g.Index, err, done, res.views)
			break
		}
		now, err := readMIGView(d.cfg.Backend, g)
		if err != nil {
			applyErr = s.rollBackLayout(ctx, name, g.Index, err, done, res.views)
			break
		}
		res.views[g.Index] = now
	}
	withdrawn := s.repartitioning.end()
	if len(res.views) == 0 {
		unlock()
		if withdrawn {
			if err := d.republish(ctx); err != nil {
				return res, errors.Join(applyErr, fmt.Errorf("publishing the devices MIG layout %q withdrew: %w", name, err))
			}
		}
		return res, applyErr
	}
	if err := d.publishMIGViews(ctx, unlock, res.views); err != nil {
		return res, fmt.Errorf("republishing the node's devices after applying MIG layout %q: %w", name, err)
	}
	return res, applyErr
}

// rollBackLayout restores the previous layout of the GPUs changed (done, the last the
// one whose change failed with cause), records what each GPU has now in views, and says
// what the layout left: which GPUs are back as they were, and which are not.
func (s *state) rollBackLayout(ctx context.Context, name string, failed int, cause error, done []layoutChange, views map[int]migView) error {
	logger := klog.FromContext(ctx)
	var restored, broken []string
	for _, c := range slices.Backward(done) {
		g := c.plan.gpu
		err := s.realizeGPULayout(previousLayout(g, c.before))
		now, rerr := readMIGView(s.mig.backend, g)
		if rerr == nil {
			views[g.Index] = now
		}
		if err == nil {
			err = rerr
		}
		if err != nil {
			logger.Error(err, "Restoring a GPU's MIG layout failed", "layout", name, "gpu", g.Index)
			broken = append(broken, fmt.Sprintf("GPU %d (%v)", g.Index, err))
			continue
		}
		restored = append(restored, fmt.Sprintf("GPU %d", g.Index))
	}
	slices.Sort(restored)
	msg := fmt.Sprintf("MIG layout %q failed on GPU %d: %v", name, failed, cause)
	if len(restored) > 0 {
		msg += "; restored to their previous layout: " + strings.Join(restored, ", ")
	}
	if len(broken) > 0 {
		msg += "; left half-applied, not restored: " + strings.Join(broken, ", ")
	}
	return fmt.Errorf("%s; no other GPU was changed", msg)
}

// previousLayout is the layout that makes g as v saw it again: its MIG mode and its
// instances at their placements (each with a compute instance of its profile).
func previousLayout(g *driver.GPU, v migView) gpuLayout {
	p := gpuLayout{gpu: g, enabled: v.enabled, profiles: []string{}}
	for _, in := range v.instances {
		p.profiles = append(p.profiles, in.Profile)
		p.instances = append(p.instances, prepared.MIGInstance{Parent: g.Index, Profile: in.Profile, GIProfileID: in.GIProfileID,
			CIProfileID: in.CIProfileID, Start: in.Placement.Start, Size: in.Placement.Size})
	}
	return p
}

package sim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/defrag"
	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/topology/placement"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// DefragExperiment is a fill–drain–refill run on 8-GPU nodes, replayed twice from the same
// arrivals: placement only, and with defragmentation. The cluster is filled with small
// pods (shares and 1–4 GPUs) that then end at random; meanwhile small pods keep arriving
// and, every LargeEvery steps, a job of 8 GPUs that needs a whole node. Large jobs wait in
// arrival order. With defragmentation, when the first waiting large job does not fit, the
// planner (defrag.Plan, 8 whole GPUs on one node, at most MaxEvictions pods) moves small
// pods and the job starts at once.
type DefragExperiment struct {
	Nodes        int
	Steps        int
	LargeEvery   int
	MaxEvictions int
	Seed         uint64
}

// DefragRow is one run's outcome.
type DefragRow struct {
	Mode string `json:"mode"`
	Seed uint64 `json:"seed"`
	// Allocated is the mean share of the GPUs allocated over the steps, in percent.
	Allocated float64 `json:"allocated"`
	// LargeArrived and LargeStarted count the 8-GPU jobs; LargeWait is the mean steps a
	// started one waited, and LargeWaiting how many still wait at the end.
	LargeArrived, LargeStarted, LargeWaiting int
	LargeWait                                float64
	// SmallRefused counts small pods that fit nowhere when they arrived.
	SmallRefused int `json:"smallRefused"`
	// Plans counts the plans carried out; Evictions the pods they moved; FreedGPUs the
	// whole GPUs they freed for large jobs.
	Plans, Evictions, FreedGPUs int
	// Bound is the most any placement could allocate, mean over the steps in percent: at
	// each step the GPU demand that could be running (DefragBound), at most the capacity.
	Bound float64 `json:"bound"`
}

// EvictionsPerFreedGPU is the cost of defragmentation: pods moved per GPU freed.
func (r DefragRow) EvictionsPerFreedGPU() float64 {
	if r.FreedGPUs == 0 {
		return 0
	}
	return float64(r.Evictions) / float64(r.FreedGPUs)
}

// arrival is a pod that arrives at a step and runs for a number of steps.
type arrival struct {
	step, runs int
	pod        placement.Pod
}

// defragShapes are the small pods' shapes and how often each comes.
var defragShapes = []struct {
	gpus   int
	milli  int64
	weight int
}{{1, 250, 3}, {1, 500, 3}, {1, 1000, 3}, {2, 1000, 2}, {4, 1000, 1}}

// arrivals draws the run's pods: a fill of small pods at step 0 (twice the GPUs, so that
// the cluster is full), then small pods each step and a large job every LargeEvery steps.
func (e DefragExperiment) arrivals() []arrival {
	rng := rand.New(rand.NewPCG(e.Seed, 0x6672))
	total := 0
	for _, s := range defragShapes {
		total += s.weight
	}
	small := func(step, n int) arrival {
		k := rng.IntN(total)
		for _, s := range defragShapes {
			if k -= s.weight; k < 0 {
				return arrival{step: step, runs: 1 + rng.IntN(e.Steps/2), pod: placement.Pod{Name: fmt.Sprintf("small-%d", n), GPUs: s.gpus, GPUMilli: s.milli}}
			}
		}
		panic("unreachable")
	}
	var out []arrival
	for demand := int64(0); demand < int64(2*8*e.Nodes)*placement.MilliPerGPU; {
		a := small(0, len(out))
		demand += a.pod.Demand()
		out = append(out, a)
	}
	for step := 1; step <= e.Steps; step++ {
		if step%e.LargeEvery == 0 {
			out = append(out, arrival{step: step, runs: e.Steps, pod: placement.Pod{Name: fmt.Sprintf("large-%d", step), GPUs: 8, GPUMilli: placement.MilliPerGPU}})
		}
		for range 2 {
			out = append(out, small(step, len(out)))
		}
	}
	return out
}

// Run replays the arrivals placement-only and with defragmentation.
func (e DefragExperiment) Run(ctx context.Context) ([]DefragRow, error) {
	if e.Nodes < 2 || e.Steps < 2 || e.LargeEvery < 1 || e.MaxEvictions < 1 {
		return nil, fmt.Errorf("defrag experiment: nodes (%d) and steps (%d) must be at least 2, large-every (%d) and max-evictions (%d) at least 1",
			e.Nodes, e.Steps, e.LargeEvery, e.MaxEvictions)
	}
	arrivals := e.arrivals()
	bound := e.bound(arrivals)
	var rows []DefragRow
	for _, withDefrag := range []bool{false, true} {
		r, err := e.replay(ctx, arrivals, withDefrag)
		if err != nil {
			return nil, err
		}
		r.Bound = bound
		rows = append(rows, r)
	}
	return rows, nil
}

// bound is the upper bound on the mean share allocated over steps 1..Steps: at step s, a
// small pod can be running only if it arrived at a step a ≤ s < a + runs (it is placed on
// arrival or never, and ends runs steps later), and a large job only if it arrived by s (it
// runs to the end once started); whatever any placement, with moves or not, runs then is
// among them, and at most the capacity. So the bound is min(GPU demand present, capacity)
// per step, averaged.
func (e DefragExperiment) bound(arrivals []arrival) float64 {
	capacity := int64(8*e.Nodes) * placement.MilliPerGPU
	var sum float64
	for s := 1; s <= e.Steps; s++ {
		var present int64
		for _, a := range arrivals {
			large := a.pod.GPUs == 8
			if a.step <= s && (large || s < a.step+a.runs) {
				present += a.pod.Demand()
			}
		}
		sum += 100 * float64(min(present, capacity)) / float64(capacity)
	}
	return sum / float64(e.Steps)
}

// defragCluster is the replay's cluster: slices, and the running pods with their claims.
type defragCluster struct {
	classes []resourceapi.DeviceClass
	slices  []resourceapi.ResourceSlice
	st      *allocation.State
	nodes   []string
	running map[string]*runningPod
	gpus    int
}

type runningPod struct {
	arrival
	node  string
	claim *resourceapi.ResourceClaim
	ends  int
}

func (e DefragExperiment) newCluster() (*defragCluster, error) {
	classes, err := deployments.DeviceClasses()
	if err != nil {
		return nil, err
	}
	c := &defragCluster{running: map[string]*runningPod{}, gpus: 8 * e.Nodes}
	for _, cl := range classes {
		c.classes = append(c.classes, *cl)
	}
	for i := range e.Nodes {
		name := fmt.Sprintf("node-%02d", i)
		sl, err := Slices(placement.NodeSpec{Name: name, GPUs: 8, Model: "V100M32"})
		if err != nil {
			return nil, err
		}
		for _, s := range sl {
			c.slices = append(c.slices, *s)
		}
		c.nodes = append(c.nodes, name)
	}
	c.st, _ = allocation.FromCluster(c.classes, c.slices, nil)
	return c, nil
}

// place puts the pod on the fullest node the allocator takes it on.
func (c *defragCluster) place(ctx context.Context, a arrival, now int) (bool, error) {
	claim, err := Claim(&a.pod, nil, int64(len(c.running))+int64(now)<<20)
	if err != nil {
		return false, err
	}
	claim.Name, claim.Namespace, claim.UID = a.pod.Name, "sim", types.UID("uid-"+a.pod.Name)
	used := map[string]int64{}
	for _, p := range c.running {
		used[p.node] += p.pod.Demand()
	}
	nodes := slices.Clone(c.nodes)
	slices.SortStableFunc(nodes, func(x, y string) int { return int(used[y] - used[x]) })
	for _, n := range nodes {
		res, err := c.st.AllocateAndCommit(ctx, n, claim)
		if errors.Is(err, allocation.ErrUnsatisfiable) {
			continue
		}
		if err != nil {
			return false, err
		}
		claim.Status.Allocation = &res[0]
		c.running[a.pod.Name] = &runningPod{arrival: a, node: n, claim: claim, ends: now + a.runs}
		return true, nil
	}
	return false, nil
}

func (c *defragCluster) end(name string) {
	p := c.running[name]
	c.st.Release(p.claim.Status.Allocation)
	delete(c.running, name)
}

// allocated is the share of GPU capacity allocated, in percent.
func (c *defragCluster) allocated() float64 {
	var m int64
	for _, p := range c.running {
		m += p.pod.Demand()
	}
	return 100 * float64(m) / float64(int64(c.gpus)*placement.MilliPerGPU)
}

// asCluster is the cluster as the planner reads it: small pods opted in to moves.
func (c *defragCluster) asCluster() *defrag.Cluster {
	out := &defrag.Cluster{Classes: c.classes, Slices: c.slices}
	for _, name := range slices.Sorted(maps.Keys(c.running)) {
		p := c.running[name]
		out.Claims = append(out.Claims, *p.claim)
		pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "sim", Name: name, Labels: map[string]string{}},
			Spec:   corev1.PodSpec{NodeName: p.node, ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: nil, ResourceClaimTemplateName: new("gpu")}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: new(p.claim.Name)}}}}
		if strings.HasPrefix(name, "small-") {
			pod.Labels[api.LabelMovable] = "true"
		}
		out.Pods = append(out.Pods, pod)
	}
	return out
}

// apply carries a plan out: each moved pod's claim is released and allocated where the
// plan placed it.
func (c *defragCluster) apply(res *defrag.Result) {
	var moved []*runningPod
	var to []defrag.PodMove
	for _, m := range res.Moves {
		for _, pm := range m.Pods {
			p := c.running[strings.TrimPrefix(pm.Pod, "sim/")]
			c.st.Release(p.claim.Status.Allocation)
			moved, to = append(moved, p), append(to, pm)
		}
	}
	for k, p := range moved {
		claim := p.claim.DeepCopy()
		claim.Status.Allocation = &to[k].Allocations[0]
		c.st.Commit(claim.Status.Allocation)
		p.claim, p.node = claim, to[k].To
	}
}

func (e DefragExperiment) replay(ctx context.Context, arrivals []arrival, withDefrag bool) (DefragRow, error) {
	row := DefragRow{Mode: "placement only", Seed: e.Seed}
	if withDefrag {
		row.Mode = "with defragmentation"
	}
	c, err := e.newCluster()
	if err != nil {
		return row, err
	}
	byStep := map[int][]arrival{}
	for _, a := range arrivals {
		byStep[a.step] = append(byStep[a.step], a)
	}
	var waiting []arrival
	var sum float64
	var waited int
	for step := 0; step <= e.Steps; step++ {
		for _, name := range slices.Sorted(maps.Keys(c.running)) {
			if c.running[name].ends <= step {
				c.end(name)
			}
		}
		for _, a := range byStep[step] {
			if a.pod.GPUs == 8 {
				row.LargeArrived++
				waiting = append(waiting, a)
			}
		}
		for len(waiting) > 0 {
			ok, err := c.place(ctx, waiting[0], step)
			if err != nil {
				return row, err
			}
			if !ok && withDefrag {
				res, err := defrag.Plan(ctx, c.asCluster(), defrag.Goal{FreeGPUs: 8, MaxEvictions: e.MaxEvictions}, defrag.Options{})
				if err != nil {
					return row, err
				}
				if res.Found && len(res.Moves) > 0 {
					c.apply(res)
					row.Plans++
					row.Evictions += res.Evictions
					row.FreedGPUs += 8
					if ok, err = c.place(ctx, waiting[0], step); err != nil {
						return row, err
					} else if !ok {
						return row, fmt.Errorf("step %d: the plan freed 8 GPUs on %s, but %s does not fit", step, res.Target, waiting[0].pod.Name)
					}
				}
			}
			if !ok {
				break
			}
			row.LargeStarted++
			waited += step - waiting[0].step
			waiting = waiting[1:]
		}
		for _, a := range byStep[step] {
			if a.pod.GPUs == 8 {
				continue
			}
			ok, err := c.place(ctx, a, step)
			if err != nil {
				return row, err
			}
			if !ok {
				row.SmallRefused++
			}
		}
		if step > 0 {
			sum += c.allocated()
		}
	}
	row.Allocated = sum / float64(e.Steps)
	row.LargeWaiting = len(waiting)
	for _, w := range waiting {
		waited += e.Steps - w.step // still waiting: counted to the end
	}
	if row.LargeArrived > 0 {
		row.LargeWait = float64(waited) / float64(row.LargeArrived)
	}
	return row, nil
}

// FormatDefragTable writes the rows as a Markdown table, each run's and, with several
// seeds, each mode's mean.
func FormatDefragTable(rows []DefragRow) string {
	var b strings.Builder
	b.WriteString("| run | seed | GPUs allocated (mean %) | upper bound (mean %) | 8-GPU jobs started / arrived | mean wait (steps) | still waiting | small pods refused | plans | pods moved | pods moved per freed GPU |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	line := func(seed string, r DefragRow, ints func(int) string) {
		fmt.Fprintf(&b, "| %s | %s | %.1f | %.1f | %s / %s | %.1f | %s | %s | %s | %s | %.2f |\n", r.Mode, seed, r.Allocated, r.Bound, ints(r.LargeStarted), ints(r.LargeArrived),
			r.LargeWait, ints(r.LargeWaiting), ints(r.SmallRefused), ints(r.Plans), ints(r.Evictions), r.EvictionsPerFreedGPU())
	}
	plain := func(n int) string { return strconv.Itoa(n) }
	seeds := map[uint64]bool{}
	for _, r := range rows {
		seeds[r.Seed] = true
		line(strconv.FormatUint(r.Seed, 10), r, plain)
	}
	if len(seeds) < 2 {
		return b.String()
	}
	var modes []string
	for _, r := range rows {
		if !slices.Contains(modes, r.Mode) {
			modes = append(modes, r.Mode)
		}
	}
	n := float64(len(seeds))
	for _, m := range modes {
		var sum DefragRow
		sum.Mode = m
		for _, r := range rows {
			if r.Mode != m {
				continue
			}
			sum.Allocated += r.Allocated / n
			sum.Bound += r.Bound / n
			sum.LargeWait += r.LargeWait / n
			sum.LargeStarted += r.LargeStarted
			sum.LargeArrived += r.LargeArrived
			sum.LargeWaiting += r.LargeWaiting
			sum.SmallRefused += r.SmallRefused
			sum.Plans += r.Plans
			sum.Evictions += r.Evictions
			sum.FreedGPUs += r.FreedGPUs
		}
		line("mean", sum, func(k int) string { return strconv.FormatFloat(float64(k)/n, 'f', 1, 64) })
	}
	return b.String()
}

package defrag_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpudra/gpudra/defrag"
	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/driver/simulated"
)

// movedPods lists the pods a plan evicts.
func movedPods(r *defrag.Result) []string {
	var out []string
	for _, m := range r.Moves {
		for _, p := range m.Pods {
			out = append(out, p.Pod)
		}
	}
	return out
}

func TestPlanFreesAWholeNodeForAPendingEightGPUGang(t *testing.T) {
	for _, tc := range []struct {
		name string
		goal defrag.Goal
	}{
		{"free node", defrag.Goal{FreeNode: true}},
		{"free 8 GPUs", defrag.Goal{FreeGPUs: 8}},
		{"for the workload", defrag.Goal{Workload: gang8(1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := scattered(t)
			res, err := defrag.Plan(context.Background(), &l.c, tc.goal, defrag.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !res.Found {
				t.Fatalf("no plan: %s", res.Reason)
			}
			if got := movedPods(res); !slices.Equal(got, []string{"team/s1a", "team/s1b"}) {
				t.Errorf("moves %v, want the two shares of n1", got)
			}
			for _, m := range res.Moves {
				for _, p := range m.Pods {
					if p.From != "n1" || p.To == "n1" || len(p.Devices) != 1 || !strings.HasSuffix(p.Devices[0], "-share") {
						t.Errorf("move %+v: want a share from n1 to another node's half-used GPU", p)
					}
				}
			}
			if res.Before.LargestFree != 6 || res.After == nil || res.After.LargestFree != 8 {
				t.Errorf("largest free before %d, after %+v; want 6, then 8", res.Before.LargestFree, res.After)
			}
			if res.Before.Stranded.SharedGPUs != 8 || res.Before.Stranded.ScatteredGPUs != 12 {
				t.Errorf("stranded before %+v, want 8 half-used GPUs and 12 scattered free ones", res.Before.Stranded)
			}
			if tc.goal.Workload == nil && (res.After.Stranded.SharedGPUs != 4 || res.After.Fragmentation >= res.Before.Fragmentation) {
				t.Errorf("after %+v, before %+v: want 4 half-used GPUs left and less fragmentation", res.After, res.Before)
			}
		})
	}
}

func TestPlanNeverMovesAPodWithoutTheOptIn(t *testing.T) {
	l := scattered(t)
	for k := range l.c.Pods {
		if l.c.Pods[k].Name == "s1b" {
			delete(l.c.Pods[k].Labels, "gpudra.dev/movable")
		}
	}
	res, err := defrag.Plan(context.Background(), &l.c, defrag.Goal{FreeNode: true}, defrag.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Found || slices.Contains(movedPods(res), "team/s1b") {
		t.Fatalf("plan %+v moves or works around s1b; no node can be freed without it", res)
	}
	if !strings.Contains(res.Reason, "pod team/s1b has no label gpudra.dev/movable") {
		t.Errorf("reason %q does not name the pod without the opt-in", res.Reason)
	}
	// Six GPUs are still free on n1 without moving s1b.
	res, err = defrag.Plan(context.Background(), &l.c, defrag.Goal{FreeGPUs: 7}, defrag.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Found || !slices.Equal(movedPods(res), []string{"team/s1a"}) {
		t.Errorf("7 GPUs: found %v, moves %v (%s); want s1a moved only", res.Found, movedPods(res), res.Reason)
	}
}

func TestPlanIsNotProposedWhenAnEvictedPodWouldRunNowhere(t *testing.T) {
	// n2 and n3 are full with jobs that may not move: n1's shares have nowhere to go.
	l := newLab(t, "n1", "n2", "n3")
	l.run("s1a", "n1", 1, 500, []int{0}, true)
	l.run("s1b", "n1", 1, 500, []int{1}, true)
	l.run("train-n2", "n2", 8, 1000, []int{0, 1, 2, 3, 4, 5, 6, 7}, false)
	l.run("train-n3", "n3", 8, 1000, []int{0, 1, 2, 3, 4, 5, 6, 7}, false)
	res, err := defrag.Plan(context.Background(), &l.c, defrag.Goal{FreeNode: true}, defrag.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Found || len(res.Moves) > 0 {
		t.Fatalf("plan %+v proposed, but the evicted shares fit nowhere", res)
	}
	if !strings.Contains(res.Reason, "fits on no node") {
		t.Errorf("reason %q does not say an evicted pod fits nowhere", res.Reason)
	}
	// With room for one share elsewhere the plan frees GPU 0 on n1 (7 free) but not the node.
	res, err = defrag.Plan(context.Background(), &l.c, defrag.Goal{FreeGPUs: 7}, defrag.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Found || len(res.Moves) != 1 || res.Moves[0].Pods[0].To != "n1" {
		t.Errorf("7 GPUs: %+v (%s); want one share moved onto the other's GPU on n1", res.Moves, res.Reason)
	}
}

func TestPDBWithNoAllowedDisruptionBlocksAMove(t *testing.T) {
	for _, tc := range []struct {
		name    string
		allowed int32
		found   bool
	}{
		{"no disruption allowed", 0, false},
		{"one allowed", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := scattered(t)
			l.pdb("s1a", tc.allowed)
			res, err := defrag.Plan(context.Background(), &l.c, defrag.Goal{FreeNode: true}, defrag.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Found != tc.found {
				t.Fatalf("found %v (%s), want %v", res.Found, res.Reason, tc.found)
			}
			if !tc.found && (slices.Contains(movedPods(res), "team/s1a") || !strings.Contains(res.Reason, "PodDisruptionBudget team/pdb-s1a allows 0")) {
				t.Errorf("reason %q does not name the budget", res.Reason)
			}
		})
	}
}

func TestKueueWorkloadMovesAsAWholeGang(t *testing.T) {
	for _, tc := range []struct {
		name     string
		optInAll bool
		found    bool
	}{
		{"every pod opted in: the gang moves together", true, true},
		{"one pod not opted in: none of the gang moves", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLab(t, "n1", "n2")
			// A two-pod Workload on n1 (GPUs 0 and 1) and room on n2's half-used GPUs.
			l.run("w-0", "n1", 1, 500, []int{0}, true, "gpudra.dev/workload-uid", "uid-w")
			l.run("w-1", "n1", 1, 500, []int{1}, tc.optInAll, "gpudra.dev/workload-uid", "uid-w")
			l.run("train", "n2", 6, 1000, []int{0, 1, 2, 3, 4, 5}, false)
			l.run("s2a", "n2", 1, 500, []int{6}, false)
			l.run("s2b", "n2", 1, 500, []int{7}, false)
			res, err := defrag.Plan(context.Background(), &l.c, defrag.Goal{FreeNode: true}, defrag.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Found != tc.found {
				t.Fatalf("found %v (%s), want %v", res.Found, res.Reason, tc.found)
			}
			if tc.found && (len(res.Moves) != 1 || res.Moves[0].Unit != "workload team/uid-w" || len(res.Moves[0].Pods) != 2 || res.Evictions != 2) {
				t.Errorf("moves %+v, want one move of both pods of workload team/uid-w", res.Moves)
			}
			if !tc.found && len(res.Moves) > 0 {
				t.Errorf("moves %+v, want none", res.Moves)
			}
		})
	}
}

func TestPlanForAGangThatCannotGetRoomSaysWhy(t *testing.T) {
	l := scattered(t)
	res, err := defrag.Plan(context.Background(), &l.c, defrag.Goal{Workload: gang8(2)}, defrag.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Found || len(res.Moves) > 0 || !strings.Contains(res.Reason, "does not fit") {
		t.Errorf("two 8-GPU pods with three nodes held by unmovable jobs: found %v, moves %v, reason %q", res.Found, res.Moves, res.Reason)
	}
}

func TestPlanIsDeterministicAndBounded(t *testing.T) {
	l := scattered(t)
	first, err := defrag.Plan(context.Background(), &l.c, defrag.Goal{FreeNode: true}, defrag.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		again, _ := defrag.Plan(context.Background(), &l.c, defrag.Goal{FreeNode: true}, defrag.Options{})
		if !slices.EqualFunc(first.Moves, again.Moves, func(a, b defrag.Move) bool {
			return a.Unit == b.Unit && slices.Equal(a.Pods[0].Devices, b.Pods[0].Devices) && a.Pods[0].To == b.Pods[0].To
		}) {
			t.Fatalf("plans differ: %+v then %+v", first.Moves, again.Moves)
		}
	}
	res, err := defrag.Plan(context.Background(), &l.c, defrag.Goal{FreeNode: true, MaxEvictions: 1}, defrag.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Found || !strings.Contains(res.Reason, "more than 1") {
		t.Errorf("at most 1 eviction: found %v, reason %q; freeing any node takes 2", res.Found, res.Reason)
	}
}

func TestGoalValidation(t *testing.T) {
	for _, tc := range []struct {
		goal defrag.Goal
		want string
	}{
		{defrag.Goal{}, "exactly one of freeGPUs, freeNode and workload"},
		{defrag.Goal{FreeGPUs: 2, FreeNode: true}, "exactly one of"},
		{defrag.Goal{FreeGPUs: -1}, "goal.freeGPUs -1: must be at least 1"},
		{defrag.Goal{FreeNode: true, MaxEvictions: -2}, "goal.maxEvictions -2"},
	} {
		_, err := defrag.Plan(context.Background(), &defrag.Cluster{}, tc.goal, defrag.Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.goal, err, tc.want)
		}
	}
}

func TestReportCountsAHalfUsedMIGGPU(t *testing.T) {
	classes, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	var c defrag.Cluster
	for _, cl := range classes {
		c.Classes = append(c.Classes, *cl)
	}
	_, sl, err := simulated.Slices("dgx-a100", "m1", driver.RenderOptions{MIG: driver.MIGDynamic, NoGroups: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sl {
		c.Slices = append(c.Slices, *s)
	}
	st, _ := allocation.FromCluster(c.Classes, c.Slices, nil)
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "mig", UID: "mig"}}
	claim.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "mig", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: "mig.gpudra.dev", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}}
	res, err := st.Allocate(context.Background(), "m1", claim)
	if err != nil {
		t.Fatal(err)
	}
	claim.Status.Allocation = &res[0]
	c.Claims = append(c.Claims, *claim)
	r, err := defrag.Plan(context.Background(), &c, defrag.Goal{FreeGPUs: 1}, defrag.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Before.Stranded.MIGPartialGPUs != 1 || r.Before.FreeGPUs != r.Before.GPUs-1 || !r.Found || len(r.Moves) != 0 {
		t.Errorf("one MIG device on m1: %+v (found %v, moves %v); want one half-used MIG GPU, the other GPUs free and nothing to move", r.Before, r.Found, r.Moves)
	}
}

// Measure says per node what the report sums: the free GPUs, the free capacity on GPUs
// that shares hold part of, the free GPUs scattered beside used ones, and the wholly free
// nodes.
func TestMeasureReportsEachNodesFreeAndStrandedGPUs(t *testing.T) {
	l := scattered(t)
	l5 := newLab(t, "n1", "n2", "n3", "n4", "n5")
	l.c.Slices, l.c.Nodes = l5.c.Slices, l5.c.Nodes
	r, nodes := defrag.Measure(&l.c, defrag.Options{})
	want := []defrag.NodeReport{
		{Node: "n1", GPUs: 8, FreeGPUs: 6, SharedGPUs: 2, SharedFree: 1, ScatteredGPUs: 6},
		{Node: "n2", GPUs: 8, FreeGPUs: 2, SharedGPUs: 2, SharedFree: 1, ScatteredGPUs: 2},
		{Node: "n3", GPUs: 8, FreeGPUs: 2, SharedGPUs: 2, SharedFree: 1, ScatteredGPUs: 2},
		{Node: "n4", GPUs: 8, FreeGPUs: 2, SharedGPUs: 2, SharedFree: 1, ScatteredGPUs: 2},
		{Node: "n5", GPUs: 8, FreeGPUs: 8},
	}
	if !slices.Equal(nodes, want) {
		t.Errorf("nodes\n%+v\nwant\n%+v", nodes, want)
	}
	if r.FreeNodes != 1 || r.FreeGPUs != 20 || r.Stranded.ScatteredGPUs != 12 || r.Stranded.SharedGPUs != 8 || r.Stranded.SharedFree != 4 {
		t.Errorf("report %+v: want 1 free node, 20 free GPUs, 12 scattered, 8 shared with 4 GPUs free on them", r)
	}
	res, err := defrag.Plan(context.Background(), &l.c, defrag.Goal{FreeNode: true}, defrag.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Before != r || !res.Found || len(res.Moves) != 0 {
		t.Errorf("plan's report %+v, found %v, moves %v: want Measure's report and n5 free already", res.Before, res.Found, res.Moves)
	}
}

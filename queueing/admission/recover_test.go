package admission

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/driver/allocation"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// onOneNode is a Workload of one pod with one 4-GPU tensor-parallel claim (a whole node of
// the lab), on one host.
func onOneNode(name string) *kueue.Workload {
	wl := job(name, "main")
	wl.Spec.PodSets[0].Count = 1
	wl.Spec.PodSets[0].Template.Annotations[api.AnnotationRequiredTopology] = "hostname"
	return wl
}

func plannedNodes(s kueue.AdmissionCheckState, podSet string) []string {
	for _, u := range s.PodSetUpdates {
		if string(u.Name) == podSet {
			return strings.Split(u.Annotations[api.AnnotationPlacement], ",")
		}
	}
	return nil
}

func workload(t *testing.T, c client.Client, name string) *kueue.Workload {
	t.Helper()
	var wl kueue.Workload
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "team-a", Name: name}, &wl); err != nil {
		t.Fatal(err)
	}
	return &wl
}

func setCondition(t *testing.T, c client.Client, name, condition string) {
	t.Helper()
	wl := workload(t, c, name)
	wl.Status.Conditions = append(wl.Status.Conditions, metav1.Condition{Type: condition, Status: metav1.ConditionTrue, Reason: condition, LastTransitionTime: metav1.Now()})
	if err := c.Status().Update(context.Background(), wl); err != nil {
		t.Fatal(err)
	}
}

func pendAgain(t *testing.T, c client.Client, name string) {
	t.Helper()
	wl := workload(t, c, name)
	wl.Status.AdmissionChecks[0] = kueue.AdmissionCheckState{Name: "gpudra-topology", State: kueue.CheckStatePending}
	if err := c.Status().Update(context.Background(), wl); err != nil {
		t.Fatal(err)
	}
}

// runPods creates the pods of a decided pod set, bound to their planned nodes, and, with
// results, their claims allocated with them.
func runPods(t *testing.T, c client.Client, wl, podSet string, decided kueue.AdmissionCheckState, results []resourceapi.AllocationResult) {
	t.Helper()
	plan := strings.Join(plannedNodes(decided, podSet), ",")
	for i, node := range plannedNodes(decided, podSet) {
		claim := fmt.Sprintf("%s-%s-%d-tp", wl, podSet, i)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: fmt.Sprintf("%s-%s-%d", wl, podSet, i),
			Labels:      map[string]string{api.LabelWorkload: wl, api.LabelPinnedSlot: fmt.Sprint(i)},
			Annotations: map[string]string{api.AnnotationPlacement: plan}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "i"}},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "tp", ResourceClaimTemplateName: ptr.To("tp4")}}},
			Status: corev1.PodStatus{ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "tp", ResourceClaimName: &claim}}}}
		if err := c.Create(context.Background(), pod); err != nil {
			t.Fatal(err)
		}
		if results == nil {
			continue
		}
		rc := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: claim},
			Status: resourceapi.ResourceClaimStatus{Allocation: &results[i]}}
		if err := c.Create(context.Background(), rc); err != nil {
			t.Fatal(err)
		}
	}
}

// finish removes a gang's pods and claims and marks its workload Finished.
func finish(t *testing.T, c client.Client, name string) {
	t.Helper()
	ctx := context.Background()
	if err := c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace("team-a"), client.MatchingLabels{api.LabelWorkload: name}); err != nil {
		t.Fatal(err)
	}
	var claims resourceapi.ResourceClaimList
	if err := c.List(ctx, &claims); err != nil {
		t.Fatal(err)
	}
	for k := range claims.Items {
		if strings.HasPrefix(claims.Items[k].Name, name+"-") {
			if err := c.Delete(ctx, &claims.Items[k]); err != nil {
				t.Fatal(err)
			}
		}
	}
	setCondition(t, c, name, kueue.WorkloadFinished)
}

// heldNodes are the nodes whose devices a reservation holds.
func heldNodes(res reservation) []string {
	var out []string
	for _, r := range res.results {
		for _, d := range r.Devices.Results {
			if !slices.Contains(out, d.Pool) {
				out = append(out, d.Pool)
			}
		}
	}
	slices.Sort(out)
	return out
}

func rackOf(s kueue.AdmissionCheckState) string {
	return s.PodSetUpdates[0].NodeSelector[api.LabelRack]
}

// A controller that takes over from another (a new leader, a restart) holds the devices of
// the gangs admitted before it that have not started, before it decides anything.
func TestNewLeaderHoldsWhatTheOldOneAdmitted(t *testing.T) {
	t.Run("a second gang is not planned onto the node of one admitted before", func(t *testing.T) {
		c := lab(t, onOneNode("first"), onOneNode("second"))
		first := reconcile(t, newReconciler(c), "first")
		if first.State != kueue.CheckStateReady {
			t.Fatalf("first: %s %q", first.State, first.Message)
		}
		x := plannedNodes(first, "main")[0]
		leader := newReconciler(c)
		second := reconcile(t, leader, "second")
		if second.State != kueue.CheckStateReady {
			t.Fatalf("second: %s %q", second.State, second.Message)
		}
		if got := plannedNodes(second, "main")[0]; got == x {
			t.Errorf("second planned on %s, the node whose 4 GPUs the first gang holds", got)
		}
		if got := heldNodes(leader.reserved["first"]); !slices.Equal(got, []string{x}) {
			t.Errorf("first gang's devices rebuilt on %v, want on its planned node %s", got, x)
		}
	})
	t.Run("a gang whose QuotaReserved condition Kueue lost is held by its admission", func(t *testing.T) {
		c := lab(t, onOneNode("first"), onOneNode("second"))
		first := reconcile(t, newReconciler(c), "first")
		if first.State != kueue.CheckStateReady {
			t.Fatalf("first: %s %q", first.State, first.Message)
		}
		x := plannedNodes(first, "main")[0]
		// Kueue v0.19 can drop the condition in a concurrent status write; the admission stays.
		wl := workload(t, c, "first")
		wl.Status.Admission = &kueue.Admission{ClusterQueue: "team-a"}
		wl.Status.Conditions = slices.DeleteFunc(wl.Status.Conditions, func(c metav1.Condition) bool { return c.Type == kueue.WorkloadQuotaReserved })
		if err := c.Status().Update(context.Background(), wl); err != nil {
			t.Fatal(err)
		}
		second := reconcile(t, newReconciler(c), "second")
		if second.State != kueue.CheckStateReady {
			t.Fatalf("second: %s %q", second.State, second.Message)
		}
		if got := plannedNodes(second, "main")[0]; got == x {
			t.Errorf("second planned on %s, the node whose GPUs the first gang holds", got)
		}
	})
	t.Run("a gang holding a rack keeps it: the next one goes to the other rack, a third waits", func(t *testing.T) {
		c := lab(t, job("train", "dp0"), job("next", "dp0"), job("third", "dp0"))
		train := reconcile(t, newReconciler(c), "train")
		if train.State != kueue.CheckStateReady {
			t.Fatalf("train: %s %q", train.State, train.Message)
		}
		leader := newReconciler(c)
		if next := reconcile(t, leader, "next"); next.State != kueue.CheckStateReady || rackOf(next) == rackOf(train) {
			t.Fatalf("next: %s %q in rack %s, want Ready outside rack %s", next.State, next.Message, rackOf(next), rackOf(train))
		}
		if third := reconcile(t, leader, "third"); third.State != kueue.CheckStateRetry {
			t.Errorf("third: %s %q, want Retry (both racks are held)", third.State, third.Message)
		}
		res := leader.reserved["train"]
		if len(res.results) != 4 || res.pods != 4 {
			t.Errorf("rebuilt %d allocations for %d pods, want 4 for 4", len(res.results), res.pods)
		}
		for _, r := range res.results {
			if n := len(r.Devices.Results); n != 4 {
				t.Errorf("a pod's claim rebuilt with %d devices, want 4", n)
			}
		}
	})
	t.Run("pods already holding their devices are not reserved again; gated ones are", func(t *testing.T) {
		c := lab(t, job("train", "dp0", "dp1"), job("next", "dp0"))
		old := newReconciler(c)
		train := reconcile(t, old, "train")
		if train.State != kueue.CheckStateReady {
			t.Fatalf("train: %s %q", train.State, train.Message)
		}
		planned := old.reserved["train"].results
		runPods(t, c, "train", "dp0", train, planned[:4])
		// dp1's pods wait at the scheduling gate: no node, no allocation.
		for i := range 4 {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: fmt.Sprintf("train-dp1-%d", i),
				Labels:      map[string]string{api.LabelWorkload: "train"},
				Annotations: map[string]string{api.AnnotationPlacement: strings.Join(plannedNodes(train, "dp1"), ",")}},
				Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: api.SchedulingGate}}, Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
			if err := c.Create(context.Background(), pod); err != nil {
				t.Fatal(err)
			}
		}
		leader := newReconciler(c)
		if next := reconcile(t, leader, "next"); next.State != kueue.CheckStateRetry {
			t.Fatalf("next: %s %q, want Retry (one rack allocated, the other held)", next.State, next.Message)
		}
		res := leader.reserved["train"]
		want := slices.Sorted(slices.Values(plannedNodes(train, "dp1")))
		if got := heldNodes(res); len(res.results) != 4 || res.pods != 8 || !slices.Equal(got, slices.Compact(want)) {
			t.Errorf("rebuilt %d allocations on %v for %d pods, want dp1's 4 on %v for the gang's 8", len(res.results), got, res.pods, want)
		}
	})
	t.Run("claims that cannot be read again: every free device of the planned nodes is held", func(t *testing.T) {
		own := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "tp4-train"}}
		spec, err := allocation.ParseClaimSpec([]byte(tp4))
		if err != nil {
			t.Fatal(err)
		}
		own.Spec.Spec = spec
		train := job("train", "dp0")
		train.Spec.PodSets[0].Template.Spec.ResourceClaims[0].ResourceClaimTemplateName = ptr.To("tp4-train")
		c := lab(t, own, train, job("next", "dp0"), job("third", "dp0"))
		decided := reconcile(t, newReconciler(c), "train")
		if decided.State != kueue.CheckStateReady {
			t.Fatalf("train: %s %q", decided.State, decided.Message)
		}
		if err := c.Delete(context.Background(), own); err != nil {
			t.Fatal(err)
		}
		leader := newReconciler(c)
		if next := reconcile(t, leader, "next"); next.State != kueue.CheckStateReady || rackOf(next) == rackOf(decided) {
			t.Fatalf("next: %s %q in rack %s, want Ready outside rack %s", next.State, next.Message, rackOf(next), rackOf(decided))
		}
		if third := reconcile(t, leader, "third"); third.State != kueue.CheckStateRetry {
			t.Errorf("third: %s %q, want Retry", third.State, third.Message)
		}
		want := slices.Sorted(slices.Values(plannedNodes(decided, "dp0")))
		if got := heldNodes(leader.reserved["train"]); !slices.Equal(got, want) {
			t.Errorf("held nodes %v, want the planned %v", got, want)
		}
	})
	t.Run("a pod set without its planned nodes is held inside its domain", func(t *testing.T) {
		c := lab(t, job("train", "dp0"), job("next", "dp0"), job("third", "dp0"))
		decided := reconcile(t, newReconciler(c), "train")
		if decided.State != kueue.CheckStateReady {
			t.Fatalf("train: %s %q", decided.State, decided.Message)
		}
		wl := workload(t, c, "train")
		wl.Status.AdmissionChecks[0].PodSetUpdates[0].Annotations = nil
		if err := c.Status().Update(context.Background(), wl); err != nil {
			t.Fatal(err)
		}
		leader := newReconciler(c)
		if next := reconcile(t, leader, "next"); next.State != kueue.CheckStateReady || rackOf(next) == rackOf(decided) {
			t.Fatalf("next: %s %q in rack %s, want Ready outside rack %s", next.State, next.Message, rackOf(next), rackOf(decided))
		}
		if third := reconcile(t, leader, "third"); third.State != kueue.CheckStateRetry {
			t.Errorf("third: %s %q, want Retry", third.State, third.Message)
		}
	})
}

// What a new leader rebuilds ends as a decision's reservation does, and what is already
// allocated or gone is not rebuilt.
func TestRebuiltReservationsEnd(t *testing.T) {
	t.Run("a gang whose claims are allocated is not held again, and its node is free once it finishes", func(t *testing.T) {
		c := lab(t, job("train", "dp0"), job("next", "dp0"), job("third", "dp0"))
		old := newReconciler(c)
		train := reconcile(t, old, "train")
		if train.State != kueue.CheckStateReady {
			t.Fatalf("train: %s %q", train.State, train.Message)
		}
		runPods(t, c, "train", "dp0", train, old.reserved["train"].results)
		leader := newReconciler(c)
		if err := leader.ensureReservations(context.Background()); err != nil {
			t.Fatal(err)
		}
		if res, held := leader.reserved["train"]; held {
			t.Errorf("a gang whose claims are all allocated was reserved again: %d allocations", len(res.results))
		}
		if next := reconcile(t, leader, "next"); next.State != kueue.CheckStateReady || rackOf(next) == rackOf(train) {
			t.Fatalf("next: %s %q in rack %s, want Ready outside rack %s (allocated there)", next.State, next.Message, rackOf(next), rackOf(train))
		}
		if third := reconcile(t, leader, "third"); third.State != kueue.CheckStateRetry {
			t.Fatalf("third: %s %q, want Retry (train's claims hold its rack)", third.State, third.Message)
		}
		finish(t, c, "train")
		pendAgain(t, c, "third")
		if third := reconcile(t, leader, "third"); third.State != kueue.CheckStateReady || rackOf(third) != rackOf(train) {
			t.Errorf("after train finished: %s %q in rack %s, want Ready in rack %s", third.State, third.Message, rackOf(third), rackOf(train))
		}
	})
	for _, tc := range []struct {
		name   string
		before func(t *testing.T, c client.Client)
		now    time.Duration
	}{
		{"finished", func(t *testing.T, c client.Client) { setCondition(t, c, "train", kueue.WorkloadFinished) }, 0},
		{"evicted", func(t *testing.T, c client.Client) { setCondition(t, c, "train", kueue.WorkloadEvicted) }, 0},
		{"running", func(t *testing.T, c client.Client) { setCondition(t, c, "train", kueue.WorkloadPodsReady) }, 0},
		{"deleted", func(t *testing.T, c client.Client) {
			if err := c.Delete(context.Background(), workload(t, c, "train")); err != nil {
				t.Fatal(err)
			}
		}, 0},
		{"decided longer ago than a reservation lasts", func(*testing.T, client.Client) {}, reservationTTL + time.Minute},
	} {
		t.Run("a workload "+tc.name+" before the new leader holds nothing", func(t *testing.T) {
			c := lab(t, job("train", "dp0"), job("next", "dp0"), job("third", "dp0"))
			if got := reconcile(t, newReconciler(c), "train"); got.State != kueue.CheckStateReady {
				t.Fatalf("train: %s %q", got.State, got.Message)
			}
			tc.before(t, c)
			leader := newReconciler(c)
			leader.Now = func() time.Time { return time.Now().Add(tc.now) }
			for _, name := range []string{"next", "third"} {
				if got := reconcile(t, leader, name); got.State != kueue.CheckStateReady {
					t.Errorf("%s: %s %q, want Ready (nothing holds either rack)", name, got.State, got.Message)
				}
			}
		})
	}
	t.Run("a rebuilt reservation ends when its workload finishes", func(t *testing.T) {
		c := lab(t, job("train", "dp0"), job("next", "dp0"), job("third", "dp0"))
		train := reconcile(t, newReconciler(c), "train")
		if train.State != kueue.CheckStateReady {
			t.Fatalf("train: %s %q", train.State, train.Message)
		}
		leader := newReconciler(c)
		reconcile(t, leader, "next")
		if third := reconcile(t, leader, "third"); third.State != kueue.CheckStateRetry {
			t.Fatalf("third: %s %q, want Retry", third.State, third.Message)
		}
		setCondition(t, c, "train", kueue.WorkloadFinished)
		if _, err := leader.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "train"}}); err != nil {
			t.Fatal(err)
		}
		pendAgain(t, c, "third")
		if third := reconcile(t, leader, "third"); third.State != kueue.CheckStateReady || rackOf(third) != rackOf(train) {
			t.Errorf("after train finished: %s %q in rack %s, want Ready in rack %s", third.State, third.Message, rackOf(third), rackOf(train))
		}
	})
}

// A rebuild that fails is returned and tried again; nothing is decided without it.
func TestRebuildErrorIsRetried(t *testing.T) {
	var failing atomic.Int32
	c := labWith(t, interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		if _, ok := list.(*kueue.WorkloadList); ok && failing.Load() > 0 {
			failing.Add(-1)
			return errors.New("the API server is away")
		}
		return c.List(ctx, list, opts...)
	}}, onOneNode("first"), onOneNode("second"))
	first := reconcile(t, newReconciler(c), "first")
	if first.State != kueue.CheckStateReady {
		t.Fatalf("first: %s %q", first.State, first.Message)
	}
	failing.Store(2)
	leader := newReconciler(c)
	key := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "second"}}
	for range 2 {
		if _, err := leader.Reconcile(context.Background(), key); err == nil || !strings.Contains(err.Error(), "the API server is away") {
			t.Fatalf("reconcile with the rebuild failing: err %v, want it returned", err)
		}
		if got := workload(t, c, "second").Status.AdmissionChecks[0]; got.State != kueue.CheckStatePending {
			t.Fatalf("decided %s without the reservations rebuilt, want Pending", got.State)
		}
	}
	second := reconcile(t, leader, "second")
	if second.State != kueue.CheckStateReady || plannedNodes(second, "main")[0] == plannedNodes(first, "main")[0] {
		t.Errorf("second: %s on %v, want Ready on another node than the first gang's %v", second.State, plannedNodes(second, "main"), plannedNodes(first, "main"))
	}
}

// The scheduler gives a pinned pod any fitting devices of its node, not the ones a
// reservation set aside. When a rebuilt gang's planned devices went to another gang's pod,
// the rebuilt gang still holds as many on its node (a new leader once placed a third gang
// on a node this left looking one GPU emptier than it was).
func TestRebuiltReservationHoldsItsShareWhenItsDevicesGoToAnotherPod(t *testing.T) {
	c, spec, decided := sharedNodeLab(t)
	now := time.Now()
	leader := newReconciler(c)
	ctx := context.Background()
	if err := leader.ensureReservations(ctx); err != nil {
		t.Fatal(err)
	}
	a, b := leader.reserved["a"], leader.reserved["b"]
	if len(a.results) != 1 || len(b.results) != 1 {
		t.Fatalf("rebuilt %d and %d allocations, want one pod's each", len(a.results), len(b.results))
	}
	for name, res := range map[string]reservation{"a": a, "b": b} {
		if len(res.claims) != 1 || res.claims[0] == nil || len(res.nodes) != 1 || res.nodes[0] != "r1-n1" {
			t.Errorf("gang %s rebuilt without the claim and node of its allocation: claims %v, nodes %v", name, res.claims, res.nodes)
		}
	}
	// a's pod is bound with the devices the rebuild set aside for b.
	runPods(t, c, "a", "main", decided(now), b.results)
	noTwoMoreFit(t, leader, spec)
}

// The scheduler writes a claim's allocation before it binds the pod. A pinned pod caught
// between the two holds its devices already: the rebuild does not reserve its slot again,
// which would fill its node on paper and leave another gang planned there with nothing held
// (a new leader then placed a third gang on that node once the pod was bound).
func TestRebuildCountsAPinnedPodWhoseClaimsAreAllocatedBeforeItIsBound(t *testing.T) {
	c, spec, _ := sharedNodeLab(t)
	ctx := context.Background()
	// a's pod: pinned to r1-n1, its claim allocated there (GPUs 0 and 1), not bound yet.
	claim := "a-main-0-tp"
	alloc := resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpus", Driver: api.DriverName, Pool: "r1-n1", Device: "gpu-0"},
		{Request: "gpus", Driver: api.DriverName, Pool: "r1-n1", Device: "gpu-1"}}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "a-main-0",
		Labels:      map[string]string{api.LabelWorkload: "a", api.LabelPinnedSlot: "0"},
		Annotations: map[string]string{api.AnnotationPlacement: "r1-n1"}},
		Spec: corev1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/hostname": "r1-n1"}, Containers: []corev1.Container{{Name: "c", Image: "i"}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "tp", ResourceClaimTemplateName: ptr.To("two")}}},
		Status: corev1.PodStatus{ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "tp", ResourceClaimName: &claim}}}}
	rc := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: claim}, Status: resourceapi.ResourceClaimStatus{Allocation: &alloc}}
	for _, o := range []client.Object{pod, rc} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	leader := newReconciler(c)
	if err := leader.ensureReservations(ctx); err != nil {
		t.Fatal(err)
	}
	if res, held := leader.reserved["a"]; held {
		t.Errorf("a's pod, its claim allocated, reserved again: %v", heldNodes(res))
	}
	if got := heldNodes(leader.reserved["b"]); !slices.Equal(got, []string{"r1-n1"}) {
		t.Fatalf("b holds devices on %v, want its 2 GPUs on r1-n1", got)
	}
	// The scheduler binds a's pod: r1-n1 is full, a's 2 GPUs in use and b's 2 held.
	pod.Spec.NodeName = "r1-n1"
	if err := c.Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	noTwoMoreFit(t, leader, spec)
}

// twoGPUs is a claim for 2 whole GPUs; twoGPUTemplate its template in team-a.
const twoGPUs = `
devices:
  requests:
  - name: gpus
    exactly: {deviceClassName: gpu.gpudra.dev, count: 2}
`

// sharedNodeLab is two one-pod gangs of 2 GPUs each, a (decided first) and b, admitted by a
// leader that is gone, both planned on r1-n1 (4 GPUs): the node is full. It returns the
// lab, the 2-GPU claim spec and the check's state as decided.
func sharedNodeLab(t *testing.T) (client.Client, resourceapi.ResourceClaimSpec, func(time.Time) kueue.AdmissionCheckState) {
	t.Helper()
	spec, err := allocation.ParseClaimSpec([]byte(twoGPUs))
	if err != nil {
		t.Fatal(err)
	}
	tpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "two"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec}}
	decided := func(at time.Time) kueue.AdmissionCheckState {
		return kueue.AdmissionCheckState{Name: "gpudra-topology", State: kueue.CheckStateReady, LastTransitionTime: metav1.NewTime(at),
			PodSetUpdates: []kueue.PodSetUpdate{{Name: "main", Annotations: map[string]string{api.AnnotationPlacement: "r1-n1"}}}}
	}
	gang := func(name string, at time.Time) *kueue.Workload {
		wl := onOneNode(name)
		wl.Spec.PodSets[0].Template.Spec.ResourceClaims[0].ResourceClaimTemplateName = ptr.To("two")
		wl.Status.AdmissionChecks[0] = decided(at)
		return wl
	}
	now := time.Now()
	return lab(t, tpl, gang("a", now.Add(-2*time.Second)), gang("b", now.Add(-time.Second))), spec, decided
}

// noTwoMoreFit checks that 2 more GPUs do not fit on r1-n1 in the leader's snapshot (they
// must not: a runs on 2 of its 4 GPUs and b holds 2).
func noTwoMoreFit(t *testing.T, leader *Reconciler, spec resourceapi.ResourceClaimSpec) {
	t.Helper()
	ctx := context.Background()
	st, _, _, err := leader.snapshot(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	probe := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "probe", UID: "probe"}, Spec: spec}
	if got, err := st.Allocate(ctx, "r1-n1", probe); !errors.Is(err, allocation.ErrUnsatisfiable) {
		t.Errorf("2 more GPUs fit on r1-n1 (%v, %v): a runs on 2 of its 4 and b holds 2", got, err)
	}
}

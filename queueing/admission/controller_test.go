package admission

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/driver/simulated"
	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

const tp4 = `
devices:
  requests:
  - name: tp
    exactly: {deviceClassName: gpu.gpudra.dev, count: 4}
  constraints:
  - matchAttribute: gpu.gpudra.dev/nvlinkClique
`

// lab builds a fake API server holding 2 racks x 4 nodes of 4 NVLinked H100s, the
// shipped DeviceClasses, the AdmissionCheck and a claim template for one TP group.
func lab(t *testing.T, extra ...client.Object) client.Client {
	t.Helper()
	return labWith(t, interceptor.Funcs{}, extra...)
}

// labWith is lab with the fake API server's calls intercepted.
func labWith(t *testing.T, funcs interceptor.Funcs, extra ...client.Object) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, resourceapi.AddToScheme, kueue.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	objs := []client.Object{
		&kueue.AdmissionCheck{ObjectMeta: metav1.ObjectMeta{Name: "gpudra-topology"}, Spec: kueue.AdmissionCheckSpec{ControllerName: api.AdmissionCheckController}},
	}
	classes, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range classes {
		objs = append(objs, c)
	}
	for r := 1; r <= 2; r++ {
		for n := 1; n <= 4; n++ {
			name := fmt.Sprintf("r%d-n%d", r, n)
			objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
				api.LabelBlock: "b1", api.LabelRack: fmt.Sprintf("r%d", r), topology.LabelHostname: name}}})
			_, slices, err := simulated.Slices("hgx-h100-4gpu", name, driver.RenderOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range slices {
				objs = append(objs, s)
			}
		}
	}
	spec, err := allocation.ParseClaimSpec([]byte(tp4))
	if err != nil {
		t.Fatal(err)
	}
	objs = append(objs, &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "tp4"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec}})
	objs = append(objs, extra...)
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&kueue.Workload{}, &kueue.AdmissionCheck{}).WithInterceptorFuncs(funcs).Build()
}

// job is a Workload with quota reserved and the gpudra check pending: pod sets of 4
// pods, each with one 4-GPU tensor-parallel claim, kept in one rack.
func job(name string, podSets ...string) *kueue.Workload {
	wl := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, UID: types.UID(name)}}
	for _, ps := range podSets {
		wl.Spec.PodSets = append(wl.Spec.PodSets, kueue.PodSet{Name: kueue.PodSetReference(ps), Count: 4, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{api.AnnotationRequiredTopology: "rack"}},
			Spec: corev1.PodSpec{
				Containers:     []corev1.Container{{Name: "worker", Image: "trainer"}},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "tp", ResourceClaimTemplateName: ptr.To("tp4")}},
			},
		}})
	}
	wl.Status.Conditions = []metav1.Condition{{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionTrue, Reason: "QuotaReserved", LastTransitionTime: metav1.Now()}}
	wl.Status.AdmissionChecks = []kueue.AdmissionCheckState{{Name: "gpudra-topology", State: kueue.CheckStatePending}}
	return wl
}

func reconcile(t *testing.T, r *Reconciler, name string) kueue.AdmissionCheckState {
	t.Helper()
	key := types.NamespacedName{Namespace: "team-a", Name: name}
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	var wl kueue.Workload
	if err := r.Client.Get(context.Background(), key, &wl); err != nil {
		t.Fatal(err)
	}
	return wl.Status.AdmissionChecks[0]
}

func newReconciler(c client.Client) *Reconciler {
	return &Reconciler{Client: c, Labels: topology.DefaultLabelKeys, Now: time.Now}
}

func TestAdmissionCheck(t *testing.T) {
	t.Run("a 3D-parallel job is admitted with one pipeline pinned per rack", func(t *testing.T) {
		r := newReconciler(lab(t, job("train", "dp0", "dp1")))
		got := reconcile(t, r, "train")
		if got.State != kueue.CheckStateReady {
			t.Fatalf("state %s: %s", got.State, got.Message)
		}
		racks := map[string]bool{}
		for _, u := range got.PodSetUpdates {
			if u.NodeSelector[api.LabelBlock] != "b1" {
				t.Errorf("%s: node selector %v lacks the block", u.Name, u.NodeSelector)
			}
			racks[u.NodeSelector[api.LabelRack]] = true
		}
		if len(got.PodSetUpdates) != 2 || len(racks) != 2 {
			t.Errorf("pod set updates %+v, want both pipelines pinned to different racks", got.PodSetUpdates)
		}
	})
	t.Run("a second job waits while the first holds the GPUs, with a message", func(t *testing.T) {
		r := newReconciler(lab(t, job("train", "dp0", "dp1"), job("next", "dp0")))
		if got := reconcile(t, r, "train"); got.State != kueue.CheckStateReady {
			t.Fatalf("first: %s %s", got.State, got.Message)
		}
		got := reconcile(t, r, "next")
		if got.State != kueue.CheckStateRetry || !strings.Contains(got.Message, "does not fit in any single rack") || got.RequeueAfterSeconds == nil {
			t.Fatalf("second: %s %q", got.State, got.Message)
		}
	})
	t.Run("a shared claim in a gang is rejected with the field path", func(t *testing.T) {
		wl := job("bad", "dp0")
		wl.Spec.PodSets[0].Template.Spec.ResourceClaims[0] = corev1.PodResourceClaim{Name: "tp", ResourceClaimName: ptr.To("one-claim")}
		got := reconcile(t, newReconciler(lab(t, wl)), "bad")
		if got.State != kueue.CheckStateRejected || !strings.Contains(got.Message, "spec.podSets[0] (dp0): resourceClaim tp") {
			t.Fatalf("%s %q", got.State, got.Message)
		}
	})
	t.Run("an unknown topology level is rejected", func(t *testing.T) {
		wl := job("bad", "dp0")
		wl.Spec.PodSets[0].Template.Annotations[api.AnnotationRequiredTopology] = "row"
		got := reconcile(t, newReconciler(lab(t, wl)), "bad")
		if got.State != kueue.CheckStateRejected || !strings.Contains(got.Message, "accepted values are block, rack, tor, hostname") {
			t.Fatalf("%s %q", got.State, got.Message)
		}
	})
	t.Run("workloads without quota or without the gpudra check are left alone", func(t *testing.T) {
		wl := job("waiting", "dp0")
		wl.Status.Conditions = nil
		if got := reconcile(t, newReconciler(lab(t, wl)), "waiting"); got.State != kueue.CheckStatePending {
			t.Fatalf("state %s", got.State)
		}
	})
}

// TestDecisionSurvivesKueuesConcurrentWrite: Kueue writes the Workload between the check's
// read and its write (the usual conflict around quota reservation). The decision is written
// in the same reconcile if the check is still pending on the same reservation, and dropped
// (no write, no devices held) if the reservation went meanwhile.
func TestDecisionSurvivesKueuesConcurrentWrite(t *testing.T) {
	for _, tc := range []struct {
		name      string
		meanwhile func(*kueue.Workload)
		want      kueue.CheckState
	}{
		{"Kueue touched something else", func(wl *kueue.Workload) {
			wl.Status.Conditions = append(wl.Status.Conditions, metav1.Condition{Type: "Other", Status: metav1.ConditionTrue, Reason: "Other", LastTransitionTime: metav1.Now()})
		}, kueue.CheckStateReady},
		{"Kueue released the quota", func(wl *kueue.Workload) {
			wl.Status.Conditions[0].Status = metav1.ConditionFalse
		}, kueue.CheckStatePending},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conflicts := 0
			c := labWith(t, interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				if wl, ok := obj.(*kueue.Workload); ok && conflicts == 0 {
					conflicts++
					var stored kueue.Workload
					if err := c.Get(ctx, client.ObjectKeyFromObject(wl), &stored); err != nil {
						return err
					}
					tc.meanwhile(&stored)
					if err := c.Status().Update(ctx, &stored); err != nil {
						return err
					}
				}
				return c.SubResource(sub).Update(ctx, obj, opts...)
			}}, job("train", "dp0", "dp1"), job("next", "dp0", "dp1"))
			r := newReconciler(c)
			got := reconcile(t, r, "train")
			if conflicts != 1 || got.State != tc.want {
				t.Fatalf("after %d conflicts: state %s (%s), want %s written in the same reconcile", conflicts, got.State, got.Message, tc.want)
			}
			// Only a written decision holds devices: with "train" dropped, "next" fits.
			next := reconcile(t, r, "next")
			if wantNext := map[kueue.CheckState]kueue.CheckState{kueue.CheckStateReady: kueue.CheckStateRetry, kueue.CheckStatePending: kueue.CheckStateReady}[tc.want]; next.State != wantNext {
				t.Errorf("next: %s (%s), want %s", next.State, next.Message, wantNext)
			}
		})
	}
}

// TestConcurrentDecisionsNeverShareDevices: workers reconcile five gangs at once, each
// needing a whole rack of the two; exactly two are admitted, on different racks.
func TestConcurrentDecisionsNeverShareDevices(t *testing.T) {
	var jobs []client.Object
	for i := range 5 {
		jobs = append(jobs, job(fmt.Sprintf("j%d", i), "dp0"))
	}
	r := newReconciler(lab(t, jobs...))
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			key := types.NamespacedName{Namespace: "team-a", Name: fmt.Sprintf("j%d", i)}
			if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: key}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	racks := map[string]string{}
	for i := range 5 {
		var wl kueue.Workload
		if err := r.Client.Get(t.Context(), types.NamespacedName{Namespace: "team-a", Name: fmt.Sprintf("j%d", i)}, &wl); err != nil {
			t.Fatal(err)
		}
		if st := wl.Status.AdmissionChecks[0]; st.State == kueue.CheckStateReady {
			rack := st.PodSetUpdates[0].NodeSelector[api.LabelRack]
			if other, taken := racks[rack]; taken {
				t.Errorf("%s and %s both placed in rack %s", other, wl.Name, rack)
			}
			racks[rack] = wl.Name
		} else if st.State != kueue.CheckStateRetry {
			t.Errorf("%s: %s %q", wl.Name, st.State, st.Message)
		}
	}
	if len(racks) != 2 {
		t.Errorf("admitted in racks %v, want one gang in each of the two racks", racks)
	}
}

func TestCheckActivatorMarksOurCheckActive(t *testing.T) {
	c := lab(t)
	key := types.NamespacedName{Name: "gpudra-topology"}
	if _, err := (&CheckActivator{Client: c}).Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	var ac kueue.AdmissionCheck
	if err := c.Get(context.Background(), key, &ac); err != nil {
		t.Fatal(err)
	}
	if len(ac.Status.Conditions) != 1 || ac.Status.Conditions[0].Type != kueue.AdmissionCheckActive || ac.Status.Conditions[0].Status != metav1.ConditionTrue {
		t.Errorf("conditions %+v, want Active=True (Kueue admits nothing through an inactive check)", ac.Status.Conditions)
	}
}

func TestWaitsForTerminatingPodsInsteadOfRetrying(t *testing.T) {
	now := metav1.Now()
	leaving := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "preempted-0", DeletionTimestamp: &now, Finalizers: []string{"test/keep"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "tp", ResourceClaimTemplateName: ptr.To("tp4")}}}}
	r := newReconciler(lab(t, job("train", "dp0", "dp1"), job("next", "dp0"), leaving))
	if got := reconcile(t, r, "train"); got.State != kueue.CheckStateReady {
		t.Fatalf("first: %s", got.State)
	}
	if got := reconcile(t, r, "next"); got.State != kueue.CheckStatePending {
		t.Fatalf("with a terminating pod holding claims: state %s %q, want Pending (keep the quota, wait)", got.State, got.Message)
	}
}

func TestReservationEndsWhenTheGangsClaimsAreAllocatedOrDeleted(t *testing.T) {
	ctx := context.Background()
	c := lab(t, job("train", "dp0", "dp1"), job("next", "dp0"), job("later", "dp0"))
	r := newReconciler(c)
	got := reconcile(t, r, "train")
	if got.State != kueue.CheckStateReady || got.PodSetUpdates[0].Labels[api.LabelWorkload] != "train" {
		t.Fatalf("first: %s, updates %+v", got.State, got.PodSetUpdates)
	}
	planned := r.reserved["train"].results
	// The pods of "train" (all 32 GPUs) are bound, but their claims' allocations are not seen
	// yet (the claims cache trails the pods cache): the devices are still held.
	var pods []*corev1.Pod
	for i := range 8 {
		claim := fmt.Sprintf("train-%d-tp", i)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: fmt.Sprintf("train-%d", i), Labels: map[string]string{api.LabelWorkload: "train"}},
			Spec: corev1.PodSpec{NodeName: fmt.Sprintf("r%d-n%d", i/4+1, i%4+1), Containers: []corev1.Container{{Name: "c", Image: "i"}},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "tp", ResourceClaimTemplateName: ptr.To("tp4")}}},
			Status: corev1.PodStatus{ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "tp", ResourceClaimName: &claim}}}}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, pod)
	}
	if got := reconcile(t, r, "next"); got.State != kueue.CheckStateRetry {
		t.Fatalf("first gang bound, its claims not seen allocated: %s %q, want Retry (its devices are held)", got.State, got.Message)
	}
	// The allocations are seen: they hold the devices now, the reservation ends.
	var claims []*resourceapi.ResourceClaim
	for i := range 8 {
		claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: fmt.Sprintf("train-%d-tp", i)},
			Status: resourceapi.ResourceClaimStatus{Allocation: &planned[i]}}
		if err := c.Create(ctx, claim); err != nil {
			t.Fatal(err)
		}
		claims = append(claims, claim)
	}
	if got := reconcile(t, r, "later"); got.State != kueue.CheckStateRetry {
		t.Fatalf("first gang's claims allocated: %s %q, want Retry", got.State, got.Message)
	}
	if _, held := r.reserved["train"]; held {
		t.Error("the reservation outlived the allocations that replace it")
	}
	// The gang finishes: its pods and claims go, and nothing of it is held any more.
	for i := range 8 {
		if err := c.Delete(ctx, pods[i]); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, claims[i]); err != nil {
			t.Fatal(err)
		}
	}
	var wl kueue.Workload
	if err := c.Get(ctx, types.NamespacedName{Namespace: "team-a", Name: "later"}, &wl); err != nil {
		t.Fatal(err)
	}
	wl.Status.AdmissionChecks[0].State = kueue.CheckStatePending
	if err := c.Status().Update(ctx, &wl); err != nil {
		t.Fatal(err)
	}
	if got := reconcile(t, r, "later"); got.State != kueue.CheckStateReady {
		t.Errorf("after the first gang finished: %s %q, want Ready", got.State, got.Message)
	}

	// A deleted workload's reservation ends at once.
	c2 := lab(t, job("gone", "dp0", "dp1"), job("after", "dp0"))
	r2 := newReconciler(c2)
	reconcile(t, r2, "gone")
	wl = kueue.Workload{}
	if err := c2.Get(ctx, types.NamespacedName{Namespace: "team-a", Name: "gone"}, &wl); err != nil {
		t.Fatal(err)
	}
	if err := c2.Delete(ctx, &wl); err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "gone"}}); err != nil {
		t.Fatal(err)
	}
	if got := reconcile(t, r2, "after"); got.State != kueue.CheckStateReady {
		t.Errorf("after the first workload was deleted: %s %q, want Ready", got.State, got.Message)
	}
}

// trainPods creates the 8 pods of job("train", "dp0", "dp1") bound to the 8 nodes, each
// naming its claim, without the claims (their allocations not seen yet).
func trainPods(t *testing.T, c client.Client) {
	t.Helper()
	for i := range 8 {
		claim := fmt.Sprintf("train-%d-tp", i)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: fmt.Sprintf("train-%d", i), Labels: map[string]string{api.LabelWorkload: "train"}},
			Spec: corev1.PodSpec{NodeName: fmt.Sprintf("r%d-n%d", i/4+1, i%4+1), Containers: []corev1.Container{{Name: "c", Image: "i"}},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "tp", ResourceClaimTemplateName: ptr.To("tp4")}}},
			Status: corev1.PodStatus{ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "tp", ResourceClaimName: &claim}}}}
		if err := c.Create(context.Background(), pod); err != nil {
			t.Fatal(err)
		}
	}
}

// The Workload cache can show a gang's pods ready before the claims cache shows their
// allocations. The devices stay held until the allocations are seen: a next gang planned
// in between would be pinned to nodes whose GPUs the first gang's pods hold, and never bind.
func TestPodsReadyBeforeTheClaimsAreSeenKeepsTheDevices(t *testing.T) {
	ctx := context.Background()
	c := lab(t, job("train", "dp0", "dp1"), job("next", "dp0"))
	r := newReconciler(c)
	if got := reconcile(t, r, "train"); got.State != kueue.CheckStateReady {
		t.Fatalf("train: %s %q", got.State, got.Message)
	}
	trainPods(t, c)
	setCondition(t, c, "train", kueue.WorkloadAdmitted)
	setCondition(t, c, "train", kueue.WorkloadPodsReady)
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "train"}}); err != nil {
		t.Fatal(err)
	}
	if got := reconcile(t, r, "next"); got.State != kueue.CheckStateRetry {
		t.Fatalf("train's pods ready, their claims not seen allocated: next %s %q, want Retry (train holds every GPU)", got.State, got.Message)
	}
}

// A decision whose write fails other than by a conflict may still have been written (a
// timeout after the API server applied it), and Kueue admits the gang on it: its devices
// stay held.
func TestDecisionWithAFailedWriteKeepsItsDevices(t *testing.T) {
	ctx := context.Background()
	failed := false
	c := labWith(t, interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
		err := c.SubResource(sub).Update(ctx, obj, opts...)
		if wl, ok := obj.(*kueue.Workload); ok && wl.Name == "train" && err == nil && !failed {
			failed = true
			return apierrors.NewTimeoutError("request applied, response lost", 1)
		}
		return err
	}}, job("train", "dp0", "dp1"), job("next", "dp0"))
	r := newReconciler(c)
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "train"}}); err == nil {
		t.Fatal("the failed write was not returned")
	}
	var wl kueue.Workload
	if err := c.Get(ctx, types.NamespacedName{Namespace: "team-a", Name: "train"}, &wl); err != nil {
		t.Fatal(err)
	}
	if st := wl.Status.AdmissionChecks[0].State; st != kueue.CheckStateReady {
		t.Fatalf("train: %s, want the decision the API server applied (Ready)", st)
	}
	if got := reconcile(t, r, "next"); got.State != kueue.CheckStateRetry {
		t.Fatalf("train admitted through a write that reported an error: next %s %q, want Retry (train holds every GPU)", got.State, got.Message)
	}
}

// Only the Workload updates the check acts on reach its workers: a check pending on reserved
// quota, and a workload becoming done (its reservation ends); Kueue's other writes around an
// admission do not queue.
func TestWorkloadEventsFilter(t *testing.T) {
	pending := job("train", "dp0")
	decided := pending.DeepCopy()
	decided.Status.AdmissionChecks[0].State = kueue.CheckStateReady
	admitted := decided.DeepCopy()
	admitted.Status.Conditions = append(admitted.Status.Conditions, metav1.Condition{Type: kueue.WorkloadAdmitted, Status: metav1.ConditionTrue})
	running := admitted.DeepCopy()
	running.Status.Conditions = append(running.Status.Conditions, metav1.Condition{Type: kueue.WorkloadPodsReady, Status: metav1.ConditionTrue})
	evicted := running.DeepCopy()
	evicted.Status.Conditions = append(evicted.Status.Conditions, metav1.Condition{Type: kueue.WorkloadEvicted, Status: metav1.ConditionTrue})
	again := evicted.DeepCopy()
	again.Labels = map[string]string{"touched": "yes"}
	noQuota := pending.DeepCopy()
	noQuota.Status.Conditions = nil
	f := workloadEvents()
	for _, tc := range []struct {
		what     string
		old, new *kueue.Workload
		want     bool
	}{
		{"quota reserved, check pending", noQuota, pending, true},
		{"check pending, no quota", pending, noQuota, false},
		{"check decided", pending, decided, false},
		{"admitted", decided, admitted, false},
		{"pods ready: the claims, not the condition, end the reservation", admitted, running, false},
		{"evicted: the reservation ends", running, evicted, true},
		{"ended already, written again", evicted, again, false},
	} {
		if got := f.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: reconcile = %v, want %v", tc.what, got, tc.want)
		}
	}
	if !f.Create(event.CreateEvent{Object: pending}) || !f.Delete(event.DeleteEvent{Object: running}) {
		t.Error("creations and deletions must reach the workers")
	}
}

// shareJob is a Workload with quota reserved and the gpudra check pending: pod set workers
// of 2 pods, each with a share of one GPU from claim template shared-inference, and that
// template asking for memory and compute.
func shareJob(memory, compute string) []client.Object {
	spec := resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu",
		Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: api.DeviceClassShare, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
			Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
				api.CapMemory: resource.MustParse(memory), api.CapCompute: resource.MustParse(compute)}}}}}}}
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "shared-inference"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec}}
	wl := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "serve", UID: "serve"},
		Spec: kueue.WorkloadSpec{PodSets: []kueue.PodSet{{Name: "workers", Count: 2, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers:     []corev1.Container{{Name: "server", Image: "inference"}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("shared-inference")}},
		}}}}}}
	wl.Status.Conditions = []metav1.Condition{{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionTrue, Reason: "QuotaReserved", LastTransitionTime: metav1.Now()}}
	wl.Status.AdmissionChecks = []kueue.AdmissionCheckState{{Name: "gpudra-topology", State: kueue.CheckStatePending}}
	return []client.Object{tmpl, wl}
}

// TestShareUnderAQueue: a queue charges a share only its compute, so a share asking for
// more of its card's memory than of its compute is refused, saying how much compute passes.
func TestShareUnderAQueue(t *testing.T) {
	t.Run("40Gi of an 80Gi H100 at compute 10 is rejected", func(t *testing.T) {
		got := reconcile(t, newReconciler(lab(t, shareJob("40Gi", "10")...)), "serve")
		want := "spec.podSets[0] (workers): ResourceClaimTemplate shared-inference: devices.requests[0] (gpu) asks for 40Gi of its card's 80Gi (50 %) but compute 10: " +
			"a queue charges a share only its compute, in gpudra.dev/gpu-percent, so its memory may not be the larger part of the card; ask for compute of at least 50"
		if got.State != kueue.CheckStateRejected || got.Message != want {
			t.Fatalf("%s %q, want Rejected %q", got.State, got.Message, want)
		}
	})
	t.Run("40Gi at compute 50 is admitted", func(t *testing.T) {
		got := reconcile(t, newReconciler(lab(t, shareJob("40Gi", "50")...)), "serve")
		if got.State != kueue.CheckStateReady || !strings.Contains(got.Message, "2 pods placed") {
			t.Fatalf("%s %q, want Ready", got.State, got.Message)
		}
	})
	t.Run("an uncapped share is rejected even when no GPU is free", func(t *testing.T) {
		objs := append(shareJob("8Gi", "0"), job("train", "dp0", "dp1"))
		r := newReconciler(lab(t, objs...))
		if got := reconcile(t, r, "train"); got.State != kueue.CheckStateReady {
			t.Fatalf("train: %s %q", got.State, got.Message)
		}
		got := reconcile(t, r, "serve")
		if got.State != kueue.CheckStateRejected || !strings.Contains(got.Message, "asks for 8Gi of its card's 80Gi (10 %) but compute 0 (no cap)") ||
			!strings.Contains(got.Message, "ask for compute of at least 10") {
			t.Fatalf("%s %q, want Rejected at once, not Retry", got.State, got.Message)
		}
	})
	t.Run("a share asked for as an extended resource gets the defaults: 1Gi, no compute", func(t *testing.T) {
		objs := shareJob("40Gi", "50")
		wl := objs[1].(*kueue.Workload)
		ps := &wl.Spec.PodSets[0].Template.Spec
		ps.ResourceClaims = nil
		ps.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceName(resourceapi.ResourceDeviceClassPrefix + api.DeviceClassShare): resource.MustParse("1")}
		got := reconcile(t, newReconciler(lab(t, objs...)), "serve")
		want := "spec.podSets[0] (workers): extended resources: the request for DeviceClass gpu-share.gpudra.dev asks for 1Gi (the default) of its card's 80Gi (1.25 %) but compute 0 (the default)"
		if got.State != kueue.CheckStateRejected || !strings.HasPrefix(got.Message, want) || !strings.HasSuffix(got.Message, "at least 2") {
			t.Fatalf("%s %q, want Rejected %q…at least 2", got.State, got.Message, want)
		}
	})
	t.Run("a share is judged on the card it is placed on", func(t *testing.T) {
		// An L40S node (46068Mi cards) next to the H100s: 40Gi at compute 50 passes on an
		// H100 but takes 89 % of an L40S.
		_, slices, err := simulated.Slices("l40s-pcie", "l40s-1", driver.RenderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		objs := append(shareJob("40Gi", "50"), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "l40s-1", Labels: map[string]string{
			api.LabelBlock: "b1", api.LabelRack: "r3", topology.LabelHostname: "l40s-1", "gpu": "l40s"}}})
		for _, s := range slices {
			objs = append(objs, s)
		}
		objs[1].(*kueue.Workload).Spec.PodSets[0].Template.Spec.NodeSelector = map[string]string{"gpu": "l40s"}
		got := reconcile(t, newReconciler(lab(t, objs...)), "serve")
		if got.State != kueue.CheckStateRejected || !strings.Contains(got.Message, "asks for 40Gi of its card's 46068Mi (88.91 %) but compute 50") ||
			!strings.HasSuffix(got.Message, "ask for compute of at least 89") {
			t.Fatalf("%s %q, want Rejected on the L40S's memory", got.State, got.Message)
		}
	})
}

// pairJob is a Workload of two pods of one GPU each, kept in one rack.
func pairJob(name string) *kueue.Workload {
	wl := job(name, "main")
	wl.Spec.PodSets[0].Count = 2
	wl.Spec.PodSets[0].Template.Spec.ResourceClaims[0].ResourceClaimTemplateName = ptr.To("one")
	return wl
}

// The scheduler gives a pod any free GPU of its node, not the one the check planned. When
// a later gang's pods take the GPUs planned for an earlier gang that has not started, the
// earlier gang still needs as many GPUs on that node: the node is full, not half free.
func TestReservationCountsByAmountWhenTheSchedulerTookItsDevices(t *testing.T) {
	ctx := context.Background()
	spec, err := allocation.ParseClaimSpec([]byte("devices:\n  requests:\n  - name: gpu\n    exactly: {deviceClassName: gpu.gpudra.dev}\n"))
	if err != nil {
		t.Fatal(err)
	}
	one := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "one"}, Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec}}
	c := lab(t, one, pairJob("first"), pairJob("second"), pairJob("third"))
	r := newReconciler(c)
	first, second := reconcile(t, r, "first"), reconcile(t, r, "second")
	if first.State != kueue.CheckStateReady || second.State != kueue.CheckStateReady {
		t.Fatalf("first %s %q, second %s %q", first.State, first.Message, second.State, second.Message)
	}
	node := plannedNodes(first, "main")[0]
	if !slices.Equal(plannedNodes(first, "main"), []string{node, node}) || !slices.Equal(plannedNodes(second, "main"), []string{node, node}) {
		t.Fatalf("first on %v, second on %v: want both on one node of 4 GPUs", plannedNodes(first, "main"), plannedNodes(second, "main"))
	}
	// The second gang's pods are scheduled first, onto the GPUs planned for the first.
	taken := r.reserved["first"].results
	for i := range 2 {
		name := fmt.Sprintf("second-%d-gpu", i)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: fmt.Sprintf("second-%d", i), Labels: map[string]string{api.LabelWorkload: "second"}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "i"}},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("one")}}},
			Status: corev1.PodStatus{ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: &name}}}}
		claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name},
			Status: resourceapi.ResourceClaimStatus{Allocation: &taken[i]}}
		for _, o := range []client.Object{pod, claim} {
			if err := c.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	third := reconcile(t, r, "third")
	if third.State != kueue.CheckStateReady {
		t.Fatalf("third: %s %q", third.State, third.Message)
	}
	if nodes := plannedNodes(third, "main"); slices.Contains(nodes, node) {
		t.Errorf("third planned on %v: %s has 4 GPUs, 2 held by the second gang's pods and 2 owed to the first gang", nodes, node)
	}
}

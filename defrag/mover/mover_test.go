package mover

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/defrag/defragtest"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// world is two 4-GPU nodes: n1 runs a half-GPU share (GPU 0) of a pod or of an admitted
// Workload; n2 a 2-GPU job and a half-GPU share (GPU 2), neither movable. Workload big
// (one pod, 4 GPUs) waits: the topology check answered Retry.
type world struct {
	objs []client.Object
	st   *allocation.State
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{}
	objs, st, err := defragtest.Cluster("hgx-h100-4gpu", "n1", "n2")
	if err != nil {
		t.Fatal(err)
	}
	w.objs, w.st = objs, st
	w.objs = append(w.objs, &kueue.AdmissionCheck{ObjectMeta: metav1.ObjectMeta{Name: "gpudra-topology"}, Spec: kueue.AdmissionCheckSpec{ControllerName: api.AdmissionCheckController}})
	spec, err := allocation.ParseClaimSpec([]byte("devices:\n  requests:\n  - name: gpus\n    exactly: {deviceClassName: gpu.gpudra.dev, count: 4}\n"))
	if err != nil {
		t.Fatal(err)
	}
	w.objs = append(w.objs, &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "four"}, Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec}})
	big := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "big", UID: "uid-big"}, Spec: kueue.WorkloadSpec{PodSets: []kueue.PodSet{{Name: "main", Count: 1,
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "w", Image: "trainer"}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: new("four")}}}}}}}}
	big.Status.AdmissionChecks = []kueue.AdmissionCheckState{{Name: "gpudra-topology", State: kueue.CheckStateRetry, Message: "podSet main (1 pods) does not fit in the cluster"}}
	w.objs = append(w.objs, big)
	w.run(t, "train", "n2", 2, 1000, []int{0, 1}, false, "")
	w.run(t, "share-2", "n2", 1, 500, []int{2}, false, "")
	return w
}

// run adds a running pod with a claim pinned to GPUs; workload, if set, is the UID label
// of the admitted Workload it belongs to.
func (w *world) run(t *testing.T, name, node string, gpus int, milli int64, pin []int, movable bool, workload string) {
	t.Helper()
	claim, pod, err := defragtest.Running(w.st, name, node, gpus, milli, pin, movable, int64(len(w.objs)))
	if err != nil {
		t.Fatal(err)
	}
	if workload != "" {
		pod.Labels[api.LabelWorkload] = workload
		wl := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "small", UID: types.UID(workload)}}
		wl.Status.Conditions = []metav1.Condition{{Type: kueue.WorkloadAdmitted, Status: metav1.ConditionTrue, Reason: "Admitted", LastTransitionTime: metav1.Now()}}
		wl.Status.AdmissionChecks = []kueue.AdmissionCheckState{{Name: "gpudra-topology", State: kueue.CheckStateReady}}
		w.objs = append(w.objs, wl)
	}
	w.objs = append(w.objs, claim, pod)
}

func (w *world) client(t *testing.T) client.Client {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, policyv1.AddToScheme, resourceapi.AddToScheme, kueue.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return ctrlfake.NewClientBuilder().WithScheme(scheme).WithObjects(w.objs...).WithStatusSubresource(&kueue.Workload{}).Build()
}

func newMover(c client.Client) *Mover {
	return &Mover{Client: c, Labels: topology.DefaultLabelKeys, Interval: time.Minute, EvictionsPerMinute: 600, MaxEvictions: 16, HoldTimeout: 100 * time.Millisecond}
}

func podGone(t *testing.T, c client.Client, name string) bool {
	t.Helper()
	err := c.Get(context.Background(), types.NamespacedName{Namespace: "team", Name: name}, &corev1.Pod{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return apierrors.IsNotFound(err)
}

func TestMoverEvictsOnlyOptedInPodsForAWaitingWorkload(t *testing.T) {
	for _, tc := range []struct {
		name    string
		movable bool
		evicted bool
	}{
		{"opted in: evicted", true, true},
		{"not opted in: never touched", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.run(t, "share-1", "n1", 1, 500, []int{0}, tc.movable, "")
			c := w.client(t)
			if err := newMover(c).Once(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := podGone(t, c, "share-1"); got != tc.evicted {
				t.Errorf("share-1 evicted %v, want %v", got, tc.evicted)
			}
			for _, p := range []string{"train", "share-2"} {
				if podGone(t, c, p) {
					t.Errorf("pod %s without the opt-in was evicted", p)
				}
			}
		})
	}
}

func TestMoverRequeuesAnAdmittedWorkloadWholeThroughItsCheck(t *testing.T) {
	w := newWorld(t)
	w.run(t, "small-0", "n1", 1, 500, []int{0}, true, "uid-small")
	c := w.client(t)
	if err := newMover(c).Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	if podGone(t, c, "small-0") {
		t.Errorf("a pod of admitted Workload small was evicted pod by pod")
	}
	var wl kueue.Workload
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "team", Name: "small"}, &wl); err != nil {
		t.Fatal(err)
	}
	if s := wl.Status.AdmissionChecks[0]; s.State != kueue.CheckStateRetry || s.Message != "moved by defragmentation to make room for workload team/big" {
		t.Errorf("Workload small's check %+v, want Retry naming team/big", s)
	}
}

func TestMoverDoesNothingWithoutAWaitingWorkload(t *testing.T) {
	w := newWorld(t)
	w.run(t, "share-1", "n1", 1, 500, []int{0}, true, "")
	for _, o := range w.objs {
		if wl, ok := o.(*kueue.Workload); ok {
			wl.Status.AdmissionChecks[0].State = kueue.CheckStatePending
		}
	}
	c := w.client(t)
	if err := newMover(c).Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	if podGone(t, c, "share-1") {
		t.Errorf("share-1 evicted though no Workload waits for room")
	}
}

// A pod whose replacement the scheduler put back into the room it was moved out of is not
// evicted again for the same Workload: the mover would only go round.
func TestMoverDoesNotEvictAgainWhatCameBack(t *testing.T) {
	w := newWorld(t)
	w.run(t, "share-1", "n1", 1, 500, []int{0}, true, "")
	rs := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "share", UID: "uid-rs", Controller: new(true)}
	var back *corev1.Pod
	for _, o := range w.objs {
		if p, ok := o.(*corev1.Pod); ok && p.Name == "share-1" {
			p.OwnerReferences = []metav1.OwnerReference{rs}
			back = p.DeepCopy()
		}
	}
	c := w.client(t)
	m := newMover(c)
	if err := m.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !podGone(t, c, "share-1") {
		t.Fatal("share-1 was not evicted for Workload big")
	}
	// The ReplicaSet's new pod lands where the old one was, on the same GPU.
	back.Name, back.UID, back.ResourceVersion = "share-1-again", "uid-again", ""
	if err := c.Create(context.Background(), back); err != nil {
		t.Fatal(err)
	}
	if err := m.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	if podGone(t, c, "share-1-again") {
		t.Error("the ReplicaSet's pod was evicted again for the same Workload")
	}
}

// The node a plan frees is held (tainted NoSchedule) from before the eviction until the
// evicted pod's replacement is placed elsewhere, then released.
func TestMoverHoldsTheFreedNodeWhileTheReplacementIsPlaced(t *testing.T) {
	w := newWorld(t)
	w.run(t, "share-1", "n1", 1, 500, []int{0}, true, "")
	rs := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "share", UID: "uid-rs", Controller: new(true)}
	var replacement *corev1.Pod
	for _, o := range w.objs {
		if p, ok := o.(*corev1.Pod); ok && p.Name == "share-1" {
			p.OwnerReferences = []metav1.OwnerReference{rs}
			replacement = p.DeepCopy()
		}
	}
	var steps []string
	held := func(c client.WithWatch, name string) bool {
		var n corev1.Node
		if err := c.Get(context.Background(), types.NamespacedName{Name: name}, &n); err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
			return t.Key == api.TaintDefragHold && t.Effect == corev1.TaintEffectNoSchedule
		})
	}
	c := interceptor.NewClient(w.client(t).(client.WithWatch), interceptor.Funcs{
		SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj client.Object, subRes client.Object, opts ...client.SubResourceCreateOption) error {
			steps = append(steps, fmt.Sprintf("evict %s (n1 held: %v)", obj.GetName(), held(c.(client.WithWatch), "n1")))
			if err := c.SubResource(sub).Create(ctx, obj, subRes, opts...); err != nil {
				return err
			}
			// The ReplicaSet makes a new pod, which the scheduler places on n2.
			replacement.Name, replacement.UID, replacement.ResourceVersion, replacement.Spec.NodeName = "share-1-new", "uid-new", "", "n2"
			return c.Create(ctx, replacement)
		},
	})
	m := newMover(c)
	m.HoldTimeout = time.Minute
	start := time.Now()
	if err := m.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []string{"evict share-1 (n1 held: true)"}; !slices.Equal(steps, want) {
		t.Errorf("steps %q, want %q", steps, want)
	}
	if held(c, "n1") {
		t.Error("n1 is still held after the replacement was placed")
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the hold lasted %s, though the replacement was placed at once", d)
	}
}

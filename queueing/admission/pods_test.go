package admission

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

func gatedPod(name, plan string, index int) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, UID: types.UID(name + "-uid"),
			Annotations:     map[string]string{api.AnnotationPlacement: plan},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: "job-uid"}}},
		Spec: corev1.PodSpec{
			SchedulingGates: []corev1.PodSchedulingGate{{Name: api.SchedulingGate}, {Name: "other.example/gate"}},
			Containers:      []corev1.Container{{Name: "c", Image: "i"}},
		},
	}
	if index >= 0 {
		pod.Annotations[annotationCompletionIndex] = fmt.Sprint(index)
	}
	return pod
}

func pin(t *testing.T, c client.Client, name string) (*corev1.Pod, error) {
	t.Helper()
	return pinWith(t, &PodPinner{Client: c}, c, name)
}

func pinWith(t *testing.T, p *PodPinner, c client.Client, name string) (*corev1.Pod, error) {
	t.Helper()
	key := types.NamespacedName{Namespace: "team-a", Name: name}
	_, err := p.Reconcile(context.Background(), ctrl.Request{NamespacedName: key})
	var pod corev1.Pod
	if gerr := c.Get(context.Background(), key, &pod); gerr != nil {
		t.Fatal(gerr)
	}
	return &pod, err
}

func TestPodPinner(t *testing.T) {
	const plan = "r1-n1,r1-n2,r2-n1,r2-n2"
	t.Run("an indexed pod goes to its planned node and only gpudra's gate is lifted", func(t *testing.T) {
		c := lab(t, gatedPod("train-2", plan, 2))
		pod, err := pin(t, c, "train-2")
		if err != nil {
			t.Fatal(err)
		}
		if got := pod.Spec.NodeSelector[topology.LabelHostname]; got != "r2-n1" {
			t.Errorf("node selector %q, want r2-n1", got)
		}
		if len(pod.Spec.SchedulingGates) != 1 || pod.Spec.SchedulingGates[0].Name != "other.example/gate" {
			t.Errorf("gates = %v", pod.Spec.SchedulingGates)
		}
	})
	t.Run("pods without an index take distinct slots", func(t *testing.T) {
		c := lab(t, gatedPod("a", plan, -1), gatedPod("b", plan, -1), gatedPod("c", plan, -1))
		seen := map[string]bool{}
		for _, n := range []string{"a", "b", "c"} {
			pod, err := pin(t, c, n)
			if err != nil {
				t.Fatal(err)
			}
			node := pod.Spec.NodeSelector[topology.LabelHostname]
			if seen[node] || !strings.Contains(plan, node) {
				t.Errorf("pod %s pinned to %q (seen %v)", n, node, seen)
			}
			seen[node] = true
		}
	})
	t.Run("pods pinned before the cache shows their siblings pinned take distinct slots", func(t *testing.T) {
		// The informer cache trails the pinner's own writes: its list shows no sibling
		// pinned yet, and a pod just pinned comes back still gated.
		base := lab(t, gatedPod("a", plan, -1), gatedPod("b", plan, -1), gatedPod("c", plan, -1)).(client.WithWatch)
		stale := map[string]*corev1.Pod{}
		for _, n := range []string{"a", "b", "c"} {
			var pod corev1.Pod
			if err := base.Get(context.Background(), types.NamespacedName{Namespace: "team-a", Name: n}, &pod); err != nil {
				t.Fatal(err)
			}
			stale[n] = &pod
		}
		cache := interceptor.NewClient(base, interceptor.Funcs{
			Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if pod, ok := obj.(*corev1.Pod); ok {
					stale[key.Name].DeepCopyInto(pod)
					return nil
				}
				return cl.Get(ctx, key, obj, opts...)
			},
			List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				if _, ok := list.(*corev1.PodList); ok {
					return nil
				}
				return cl.List(ctx, list, opts...)
			},
		})
		p := &PodPinner{Client: cache}
		seen := map[string]string{}
		for _, n := range []string{"a", "b", "a", "c"} {
			if _, err := p.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: n}}); err != nil {
				t.Fatalf("pod %s: %v", n, err)
			}
			var pod corev1.Pod
			if err := base.Get(context.Background(), types.NamespacedName{Namespace: "team-a", Name: n}, &pod); err != nil {
				t.Fatal(err)
			}
			node := pod.Spec.NodeSelector[topology.LabelHostname]
			if other, dup := seen[node]; dup && other != n {
				t.Errorf("pods %s and %s both pinned to %s", other, n, node)
			}
			seen[node] = n
		}
		if len(seen) != 3 {
			t.Errorf("pinned to %v, want 3 distinct planned nodes", seen)
		}
	})
	t.Run("an index outside the plan is an error and the pod stays gated", func(t *testing.T) {
		c := lab(t, gatedPod("train-9", plan, 9))
		pod, err := pin(t, c, "train-9")
		if err == nil || !strings.Contains(err.Error(), "outside the plan of 4 pods") {
			t.Errorf("err = %v", err)
		}
		if !hasGate(pod) {
			t.Error("gate lifted for an unplaceable pod")
		}
	})
}

func TestReadyCarriesEachPodsNode(t *testing.T) {
	r := newReconciler(lab(t, job("train", "dp0", "dp1")))
	got := reconcile(t, r, "train")
	for _, u := range got.PodSetUpdates {
		nodes := strings.Split(u.Annotations[api.AnnotationPlacement], ",")
		distinct := map[string]bool{}
		for _, n := range nodes {
			distinct[n] = true
			if !strings.HasPrefix(n, u.NodeSelector[api.LabelRack]+"-") {
				t.Errorf("%s: node %s is outside rack %s", u.Name, n, u.NodeSelector[api.LabelRack])
			}
		}
		if len(nodes) != 4 || len(distinct) != 4 {
			t.Errorf("%s: placement %v, want 4 distinct nodes (one tensor-parallel group each)", u.Name, nodes)
		}
	}
}

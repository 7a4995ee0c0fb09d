package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	ctrlfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/defrag"
	"github.com/gpudra/gpudra/defrag/defragtest"
	"github.com/gpudra/gpudra/driver/allocation"
)

// fragmentedCluster is two 4-GPU H100 nodes: on n1 a movable half-GPU share (GPU 0); on n2
// a 2-GPU job and a half-GPU share (GPU 2) that may not move. No node has 4 GPUs free.
func fragmentedCluster(t *testing.T) []runtime.Object {
	t.Helper()
	cluster, st, err := defragtest.Cluster("hgx-h100-4gpu", "n1", "n2")
	if err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	for _, o := range cluster {
		objs = append(objs, o)
	}
	run := func(name, node string, gpus int, milli int64, pin []int, movable bool) {
		claim, pod, err := defragtest.Running(st, name, node, gpus, milli, pin, movable, int64(len(objs)))
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, claim, pod)
	}
	run("share-1", "n1", 1, 500, []int{0}, true)
	run("train", "n2", 2, 1000, []int{0, 1}, false)
	run("share-2", "n2", 1, 500, []int{2}, false)
	return objs
}

func TestDefragPlanFreesANodeOnAFakeCluster(t *testing.T) {
	c := &clients{kube: fake.NewClientset(fragmentedCluster(t)...)}
	res, err := defragPlan(context.Background(), c, "team", defragGoalFlags{freeNode: true, maxEvictions: 16})
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := printDefrag(&text, res, ""); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"8 GPUs on 2 nodes: 3.00 allocated, 4 free, at most 3 free on one node",
		"stranded: 2 GPUs part-used by shares (1.00 GPUs left on them), 4 free GPUs on 2 partly used nodes",
		"plan on n1: 1 move, 1 pod evicted",
		"pod team/share-1  team/share-1  n1    n2  gpu-2-share",
		"after the moves:\n  8 GPUs on 2 nodes: 3.00 allocated, 5 free, at most 4 free on one node",
		"stranded: 0 GPUs part-used by shares",
		"not movable (2):\n  pod team/share-2 has no label gpudra.dev/movable=\"true\"",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, text.String())
		}
	}
	var js bytes.Buffer
	if err := printDefrag(&js, res, "json"); err != nil {
		t.Fatal(err)
	}
	var back defrag.Result
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if !back.Found || back.Target != "n1" || len(back.Moves) != 1 || back.Moves[0].Pods[0].To != "n2" {
		t.Errorf("-o json read back %+v, want n1 freed by moving share-1 to n2", back)
	}
}

func TestDefragPlanForAPendingWorkload(t *testing.T) {
	objs := fragmentedCluster(t)
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, resourceapi.AddToScheme, kueue.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	spec, err := allocation.ParseClaimSpec([]byte("devices:\n  requests:\n  - name: gpus\n    exactly: {deviceClassName: gpu.gpudra.dev, count: 4}\n"))
	if err != nil {
		t.Fatal(err)
	}
	wl := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "big"}, Spec: kueue.WorkloadSpec{PodSets: []kueue.PodSet{{Name: "main", Count: 1,
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "w", Image: "trainer"}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: new("four")}}}}}}}}
	ctrl := ctrlfake.NewClientBuilder().WithScheme(scheme).WithObjects(wl,
		&resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "four"}, Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec}}).Build()
	c := &clients{kube: fake.NewClientset(objs...), ctrl: ctrl}
	res, err := defragPlan(context.Background(), c, "team", defragGoalFlags{forWorkload: "workload/big", maxEvictions: 16})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Found || len(res.Moves) != 1 || res.Moves[0].Unit != "pod team/share-1" || res.Goal != "room for workload team/big" {
		t.Errorf("plan %+v, want share-1 moved to make room for team/big", res)
	}
	if _, err := defragPlan(context.Background(), c, "team", defragGoalFlags{forWorkload: "workload/none", maxEvictions: 16}); err == nil || !strings.Contains(err.Error(), "--for workload/none") {
		t.Errorf("missing workload: error %v, want one naming --for", err)
	}
}

func TestDefragPlanFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "exactly one of --free-gpus N, --free-node and --for workload/NAME"},
		{[]string{"--free-node", "--free-gpus", "2"}, "exactly one of"},
		{[]string{"--for", "job/train"}, `--for "job/train": want workload/NAME`},
		{[]string{"--free-node", "-o", "wide"}, `--output "wide": accepted values are json, yaml`},
		{[]string{"--free-gpus", "-3"}, "--free-gpus -3: must be at least 1"},
	} {
		cmd := newDefragCommandWith(func(*clientFlags) (*clients, error) { return &clients{kube: fake.NewClientset()}, nil })
		cmd.SetArgs(append([]string{"plan"}, tc.args...))
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

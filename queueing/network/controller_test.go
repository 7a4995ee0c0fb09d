package network

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

const file = `
blocks:
- name: b1
  racks:
  - name: r1
    tor: tor-11
    nodes: [n1, n2]
  - name: r2
    nodes: [n3, not-yet-joined]
`

func fakeCluster(t *testing.T, data string) client.Client {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, kueue.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	objs := []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "gpudra", Name: "network"}, Data: map[string]string{FileKey: data}},
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"keep": "me"}}})
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
}

func TestNetworkController(t *testing.T) {
	ctx := context.Background()
	c := fakeCluster(t, file)
	r := &Reconciler{Client: c, Labels: topology.DefaultLabelKeys, ConfigMap: types.NamespacedName{Namespace: "gpudra", Name: "network"},
		FlavorNodeLabels: map[string]string{"node-pool": "gpu"}}
	for range 2 { // idempotent
		if _, err := r.Reconcile(ctx, ctrl.Request{}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][3]string{"n1": {"b1", "r1", "tor-11"}, "n2": {"b1", "r1", "tor-11"}, "n3": {"b1", "r2", "r2"}}
	for n, w := range want {
		var node corev1.Node
		if err := c.Get(ctx, types.NamespacedName{Name: n}, &node); err != nil {
			t.Fatal(err)
		}
		got := [3]string{node.Labels[api.LabelBlock], node.Labels[api.LabelRack], node.Labels[api.LabelToR]}
		if got != w || node.Labels["keep"] != "me" {
			t.Errorf("%s labels %v", n, node.Labels)
		}
	}
	var topo kueue.Topology
	if err := c.Get(ctx, types.NamespacedName{Name: TopologyName}, &topo); err != nil {
		t.Fatal(err)
	}
	if len(topo.Spec.Levels) != 4 || topo.Spec.Levels[1].NodeLabel != api.LabelRack || topo.Spec.Levels[2].NodeLabel != api.LabelToR ||
		topo.Spec.Levels[3].NodeLabel != topology.LabelHostname {
		t.Errorf("levels %+v, want block, rack, tor, hostname", topo.Spec.Levels)
	}
	var flavor kueue.ResourceFlavor
	if err := c.Get(ctx, types.NamespacedName{Name: FlavorName}, &flavor); err != nil || flavor.Spec.TopologyName == nil || *flavor.Spec.TopologyName != TopologyName || flavor.Spec.NodeLabels["node-pool"] != "gpu" {
		t.Errorf("flavor %+v, err %v", flavor.Spec, err)
	}
}

func TestBadTopologyFile(t *testing.T) {
	for data, want := range map[string]string{
		"blocks:\n- name: b1\n  racks:\n  - name: r1\n    nodes: [a]\n  - name: r2\n    nodes: [a]\n": "blocks[0].racks[1].nodes[0]: node a is already in blocks[0].racks[0].nodes[0]",
		"blocks:\n- racks: []\n":           "blocks[0].name: required",
		"blocks:\n- name: b\n  rows: []\n": `unknown field "rows"`,
	} {
		if _, err := ParseFile([]byte(data)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseFile: err = %v, want %q", err, want)
		}
	}
	// A bad file leaves the node labels alone.
	c := fakeCluster(t, "blocks: [")
	r := &Reconciler{Client: c, Labels: topology.DefaultLabelKeys, ConfigMap: types.NamespacedName{Namespace: "gpudra", Name: "network"}}
	if _, err := r.Reconcile(context.Background(), ctrl.Request{}); err != nil {
		t.Fatal(err)
	}
	var node corev1.Node
	_ = c.Get(context.Background(), types.NamespacedName{Name: "n1"}, &node)
	if _, ok := node.Labels[api.LabelRack]; ok {
		t.Error("a bad file labelled a node")
	}
}

// TestNetworkControllerLabelsToRsAndOversubscription: a rack with two ToRs gives each node
// its own ToR, the ratios become labels the check reads, and a ratio dropped from the file
// is removed from the nodes.
func TestNetworkControllerLabelsToRsAndOversubscription(t *testing.T) {
	ctx := context.Background()
	c := fakeCluster(t, `
blocks:
- name: b1
  oversubscription: 2
  racks:
  - name: r1
    tors:
    - name: tor-a
      oversubscription: 3:1
      nodes: [n1, n2]
    - name: tor-b
      nodes: [n3]
`)
	r := &Reconciler{Client: c, Labels: topology.DefaultLabelKeys, ConfigMap: types.NamespacedName{Namespace: "gpudra", Name: "network"}}
	if _, err := r.Reconcile(ctx, ctrl.Request{}); err != nil {
		t.Fatal(err)
	}
	want := map[string][4]string{"n1": {"r1", "tor-a", "3", "2"}, "n2": {"r1", "tor-a", "3", "2"}, "n3": {"r1", "tor-b", "", "2"}}
	labels := func(n string) [4]string {
		var node corev1.Node
		if err := c.Get(ctx, types.NamespacedName{Name: n}, &node); err != nil {
			t.Fatal(err)
		}
		return [4]string{node.Labels[api.LabelRack], node.Labels[api.LabelToR], node.Labels[api.LabelToROversubscription], node.Labels[api.LabelBlockOversubscription]}
	}
	for n, w := range want {
		if got := labels(n); got != w {
			t.Errorf("%s: rack, ToR, ToR and spine oversubscription %v, want %v", n, got, w)
		}
	}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, r.ConfigMap, &cm); err != nil {
		t.Fatal(err)
	}
	cm.Data[FileKey] = "blocks:\n- name: b1\n  racks:\n  - name: r1\n    nodes: [n1]\n"
	if err := c.Update(ctx, &cm); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, ctrl.Request{}); err != nil {
		t.Fatal(err)
	}
	if got := labels("n1"); got != [4]string{"r1", "r1", "", ""} {
		t.Errorf("n1 after the ratios left the file: %v, want rack r1, ToR r1, no ratios", got)
	}
}

package allocation_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/driver/simulated"
)

func twoNodes(t *testing.T) *allocation.State {
	t.Helper()
	classes, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	var slices []*resourceapi.ResourceSlice
	for _, n := range []string{"a", "b"} {
		_, s, err := simulated.Slices("l40s-pcie", n, driver.RenderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		slices = append(slices, s...)
	}
	return allocation.New(classes, slices)
}

func node(name string, mutate func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name, "pool": "gpu"}}}
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourcePods: resource.MustParse("110")}
	if mutate != nil {
		mutate(n)
	}
	return n
}

func pod(name string, cpu string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID("uid-" + name)}}
	c := corev1.Container{Name: "main"}
	if cpu != "" {
		c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	}
	p.Spec.Containers = []corev1.Container{c}
	return p
}

var noSchedule = corev1.Taint{Key: "lab.gpudra.dev/real-node", Value: "true", Effect: corev1.TaintEffectNoSchedule}

func TestNodeFilter(t *testing.T) {
	st := twoNodes(t)
	logger := klog.Background()
	tainted := node("a", func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{noSchedule} })
	for _, tc := range []struct {
		name   string
		pod    func(*corev1.Pod)
		node   *corev1.Node
		onNode []*corev1.Pod
		want   string
	}{
		{name: "no filter keeps it out", node: node("a", nil)},
		{name: "untolerated NoSchedule taint", node: tainted, want: "node(s) had untolerated taint(s): lab.gpudra.dev/real-node=true:NoSchedule"},
		{name: "tolerated taint", node: tainted, pod: func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: noSchedule.Key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		}},
		{name: "PreferNoSchedule taint only scores", node: node("a", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "soft", Effect: corev1.TaintEffectPreferNoSchedule}}
		})},
		{name: "unschedulable node", node: node("a", func(n *corev1.Node) { n.Spec.Unschedulable = true }), want: allocation.ReasonUnschedulable},
		{name: "unschedulable node, tolerated", node: node("a", func(n *corev1.Node) { n.Spec.Unschedulable = true }), pod: func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists}}
		}},
		{name: "nodeSelector mismatch", node: node("a", nil), pod: func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"pool": "cpu"} },
			want: "node(s) didn't match Pod's node affinity/selector"},
		{name: "nodeSelector match", node: node("a", nil), pod: func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"pool": "gpu"} }},
		{name: "required node affinity mismatch", node: node("a", nil), pod: func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}}}}}}
		}, want: allocation.ReasonNodeAffinity},
		{name: "insufficient cpu: pods on the node request 6 of 8", node: node("a", nil), pod: func(p *corev1.Pod) { *p = *pod("p", "3") },
			onNode: []*corev1.Pod{pod("other", "6")}, want: "Insufficient cpu"},
		{name: "finished pods hold no cpu", node: node("a", nil), pod: func(p *corev1.Pod) { *p = *pod("p", "3") },
			onNode: []*corev1.Pod{func() *corev1.Pod { o := pod("done", "6"); o.Status.Phase = corev1.PodSucceeded; return o }()}},
		{name: "too many pods", node: node("a", func(n *corev1.Node) { n.Status.Allocatable[corev1.ResourcePods] = resource.MustParse("1") }),
			onNode: []*corev1.Pod{pod("other", "")}, want: allocation.ReasonTooManyPods},
		{name: "bound elsewhere", node: node("a", nil), pod: func(p *corev1.Pod) { p.Spec.NodeName = "b" }, want: allocation.ReasonNodeName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pod("p", "")
			if tc.pod != nil {
				tc.pod(p)
			}
			if got := st.NodeFilter(logger, p, tc.node, tc.onNode); got != tc.want {
				t.Errorf("NodeFilter = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestExplainFilteredNeverFitsARuledOutNode(t *testing.T) {
	st := twoNodes(t)
	spec, err := allocation.ParseClaimSpec([]byte(`
devices:
  requests:
  - name: gpu
    exactly: {deviceClassName: gpu.gpudra.dev}
`))
	if err != nil {
		t.Fatal(err)
	}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "one", UID: "u1"}, Spec: spec}
	tainted := node("a", func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{noSchedule} })
	for _, tc := range []struct {
		name      string
		tolerates bool
	}{{"without the toleration", false}, {"with the toleration", true}} {
		t.Run(tc.name, func(t *testing.T) {
			p := pod("p", "")
			if tc.tolerates {
				p.Spec.Tolerations = []corev1.Toleration{{Key: noSchedule.Key, Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
			}
			ruled := map[string]string{
				"a": st.NodeFilter(klog.Background(), p, tainted, nil),
				"b": st.NodeFilter(klog.Background(), p, node("b", func(n *corev1.Node) { n.Spec.Unschedulable = true }), nil),
			}
			diag, err := st.ExplainFiltered(context.Background(), claim, allocation.Holders{}, ruled)
			if err != nil {
				t.Fatal(err)
			}
			byNode := map[string]allocation.NodeDiagnosis{}
			for _, d := range diag {
				byNode[d.Node] = d
			}
			a, b := byNode["a"], byNode["b"]
			if b.Fits || b.RuledOut != allocation.ReasonUnschedulable || !strings.Contains(b.Reason, "its devices would fit") {
				t.Errorf("unschedulable node b: %+v, want ruled out with its devices fitting", b)
			}
			if tc.tolerates {
				if !a.Fits || a.RuledOut != "" || !strings.HasPrefix(a.Reason, "fits: ") {
					t.Errorf("tolerated taint: node a %+v, want fits", a)
				}
				if diag[0].Node != "a" {
					t.Errorf("the fitting node is not first: %+v", diag)
				}
				return
			}
			if a.Fits || !strings.Contains(a.RuledOut, "untolerated taint") || strings.HasPrefix(a.Reason, "fits") || len(a.Devices) != 0 {
				t.Errorf("untolerated taint: node a %+v, want ruled out, never fits", a)
			}
		})
	}
}

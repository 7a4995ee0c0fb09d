package gang_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/queueing/gang"
	"github.com/gpudra/gpudra/topology"
)

func TestNodeTaintsLimitCandidates(t *testing.T) {
	maintenance := func(effect corev1.TaintEffect) []corev1.Taint {
		return []corev1.Taint{{Key: "example.com/maintenance", Value: "true", Effect: effect}}
	}
	tolerate := func(effect corev1.TaintEffect) []corev1.Toleration {
		return []corev1.Toleration{{Key: "example.com/maintenance", Operator: corev1.TolerationOpExists, Effect: effect}}
	}
	// Two racks of two nodes; one pod set of two 4-GPU pods that must share a rack. Without
	// taints it lands in the first rack, b1/r1.
	for _, tc := range []struct {
		name        string
		taints      gang.Taints
		tolerations []corev1.Toleration
		count       int
		required    string
		wantRack    string   // where the gang goes ("" = unplaceable)
		wantReason  []string // what an unplaceable reason says
		notReason   []string // what it must not say
	}{
		{name: "an untolerated NoSchedule taint sends the gang to the other rack",
			taints: gang.Taints{"r1-n1": maintenance(corev1.TaintEffectNoSchedule)}, count: 2, required: topology.LevelRack, wantRack: "b1/r2"},
		{name: "an untolerated NoExecute taint sends the gang to the other rack",
			taints: gang.Taints{"r1-n2": maintenance(corev1.TaintEffectNoExecute)}, count: 2, required: topology.LevelRack, wantRack: "b1/r2"},
		{name: "a toleration for the taint lets the gang use the node",
			taints: gang.Taints{"r1-n1": maintenance(corev1.TaintEffectNoSchedule)}, tolerations: tolerate(corev1.TaintEffectNoSchedule),
			count: 2, required: topology.LevelRack, wantRack: "b1/r1"},
		{name: "a toleration for another effect does not",
			taints: gang.Taints{"r1-n1": maintenance(corev1.TaintEffectNoExecute)}, tolerations: tolerate(corev1.TaintEffectNoSchedule),
			count: 2, required: topology.LevelRack, wantRack: "b1/r2"},
		{name: "a PreferNoSchedule taint does not keep the gang off a node",
			taints: gang.Taints{"r1-n1": maintenance(corev1.TaintEffectPreferNoSchedule)}, count: 2, required: topology.LevelRack, wantRack: "b1/r1"},
		{name: "when only taints keep the gang out, the reason names them",
			taints: gang.Taints{"r1-n1": maintenance(corev1.TaintEffectNoSchedule), "r2-n1": maintenance(corev1.TaintEffectNoSchedule),
				"r2-n2": {{Key: "example.com/reserved", Effect: corev1.TaintEffectNoExecute}}},
			count: 2, required: topology.LevelRack,
			wantReason: []string{"only taints keep it out", "example.com/maintenance=true:NoSchedule (2 nodes)", "example.com/reserved:NoExecute (1 node)"}},
		{name: "when devices are short too, the reason lists the taints but does not blame them alone",
			taints: gang.Taints{"r1-n1": maintenance(corev1.TaintEffectNoSchedule)}, count: 5,
			wantReason: []string{"the cluster fits 3 of 5", "nodes left out for taints its pods do not tolerate: example.com/maintenance=true:NoSchedule (1 node)"},
			notReason:  []string{"only taints"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, net := cluster(t, 2, 2)
			set := gang.PodSet{Name: "tp", Count: tc.count, Claims: []resourceapi.ResourceClaimSpec{spec(t, tensorParallel4)},
				Required: tc.required, Tolerations: tc.tolerations}
			p, _, err := gang.Plan(context.Background(), st, net, tc.taints, []gang.PodSet{set})
			if tc.wantRack == "" {
				if !gang.IsUnplaceable(err) {
					t.Fatalf("err = %v, want unplaceable", err)
				}
				for _, want := range tc.wantReason {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("reason %q does not say %q", err, want)
					}
				}
				for _, not := range tc.notReason {
					if strings.Contains(err.Error(), not) {
						t.Errorf("reason %q says %q", err, not)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Domains["tp"] != tc.wantRack {
				t.Errorf("placed in %s on %v, want %s", p.Domains["tp"], p.Nodes["tp"], tc.wantRack)
			}
			for _, n := range p.Nodes["tp"] {
				if _, bad := tc.taints[n]; bad && len(tc.tolerations) == 0 && tc.taints[n][0].Effect != corev1.TaintEffectPreferNoSchedule {
					t.Errorf("pod placed on %s, whose taint %v it does not tolerate", n, tc.taints[n])
				}
			}
		})
	}
}

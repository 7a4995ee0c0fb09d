package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/topology"
)

func explainOf(t *testing.T, c client.Client, name string) *Report {
	t.Helper()
	var wl kueue.Workload
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "team-a", Name: name}, &wl); err != nil {
		t.Fatal(err)
	}
	rep, err := Explain(context.Background(), c, topology.DefaultLabelKeys, &wl)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestExplainTwoPodSetsOverTwoRacks(t *testing.T) {
	t.Run("both racks free: the gang fits, one pod set per rack", func(t *testing.T) {
		rep := explainOf(t, lab(t, job("train", "dp0", "dp1")), "train")
		if rep.Now.State != string(kueue.CheckStateReady) || !strings.Contains(rep.Now.Message, "gang fits") {
			t.Fatalf("now %+v, want Ready", rep.Now)
		}
		if rep.Check == nil || rep.Check.Name != "gpudra-topology" || rep.Check.State != string(kueue.CheckStatePending) {
			t.Errorf("check %+v, want gpudra-topology Pending", rep.Check)
		}
		if len(rep.PodSets) != 2 {
			t.Fatalf("%d pod sets, want 2", len(rep.PodSets))
		}
		planned := map[string]bool{}
		for _, ps := range rep.PodSets {
			if ps.Count != 4 || ps.Required != "rack" || len(ps.ClaimTemplates) != 1 || ps.ClaimTemplates[0] != "tp4" || ps.Claims != 1 {
				t.Errorf("pod set %s: %+v, want 4 pods, claim template tp4, rack", ps.Name, ps)
			}
			if len(ps.Domains) != 2 {
				t.Fatalf("pod set %s: domains %+v, want the two racks", ps.Name, ps.Domains)
			}
			for k, d := range ps.Domains {
				if want := fmt.Sprintf("b1/r%d", k+1); d.Name != want || d.Block != "b1" || d.Rack != fmt.Sprintf("r%d", k+1) || len(d.Nodes) != 4 || !d.Fit || d.Fits != 4 {
					t.Errorf("pod set %s domain %d: %+v, want %s with 4 nodes, all 4 pods fit", ps.Name, k, d, want)
				}
			}
			if ps.Planned == nil || len(ps.Planned.Nodes) != 4 {
				t.Fatalf("pod set %s planned %+v, want 4 nodes", ps.Name, ps.Planned)
			}
			planned[ps.Planned.Domain] = true
		}
		if len(planned) != 2 {
			t.Errorf("planned domains %v, want one pod set per rack", planned)
		}
	})

	t.Run("two nodes of rack 2 tainted: each rack's fit, the Retry message shown", func(t *testing.T) {
		c := lab(t)
		for _, n := range []string{"r2-n1", "r2-n2"} {
			var node corev1.Node
			if err := c.Get(context.Background(), types.NamespacedName{Name: n}, &node); err != nil {
				t.Fatal(err)
			}
			node.Spec.Taints = []corev1.Taint{{Key: "maintenance", Value: "true", Effect: corev1.TaintEffectNoSchedule}}
			if err := c.Update(context.Background(), &node); err != nil {
				t.Fatal(err)
			}
		}
		wl := job("train", "dp0", "dp1")
		wl.Status.AdmissionChecks[0].State = kueue.CheckStateRetry
		wl.Status.AdmissionChecks[0].Message = "podSet dp1 (4 pods) does not fit in any single rack: b1/r2 fits 2 of 4"
		if err := c.Create(context.Background(), wl); err != nil {
			t.Fatal(err)
		}
		rep := explainOf(t, c, "train")
		if rep.Check == nil || rep.Check.State != string(kueue.CheckStateRetry) || rep.Check.Message != wl.Status.AdmissionChecks[0].Message {
			t.Errorf("check %+v, want the Workload's Retry and its message", rep.Check)
		}
		if rep.Now.State != string(kueue.CheckStateRetry) || !strings.Contains(rep.Now.Message, "does not fit in any single rack") {
			t.Errorf("now %+v, want Retry: does not fit in any single rack", rep.Now)
		}
		for _, ps := range rep.PodSets {
			r1, r2 := ps.Domains[0], ps.Domains[1]
			if !r1.Fit || r1.Fits != 4 || len(r1.LeftOut) != 0 {
				t.Errorf("pod set %s rack 1: %+v, want all 4 pods to fit", ps.Name, r1)
			}
			if r2.Fit || r2.Fits != 2 || len(r2.LeftOut) != 2 || !strings.Contains(r2.LeftOut[0].Reason, "untolerated taint") ||
				!strings.Contains(r2.LeftOut[0].Reason, "maintenance=true:NoSchedule") || !strings.Contains(r2.Reason, "fits 2 of 4") {
				t.Errorf("pod set %s rack 2: %+v, want 2 of 4, the two tainted nodes left out", ps.Name, r2)
			}
			if ps.Planned != nil {
				t.Errorf("pod set %s planned %+v on a gang that does not fit", ps.Name, ps.Planned)
			}
		}
		data, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		var back Report
		if err := json.Unmarshal(data, &back); err != nil || back.PodSets[1].Domains[1].Fits != 2 || back.Now.Message != rep.Now.Message {
			t.Errorf("report does not read back from JSON (%v):\n%s", err, data)
		}
	})

	t.Run("a pod set tolerating the taint fits in rack 2", func(t *testing.T) {
		c := lab(t)
		var node corev1.Node
		if err := c.Get(context.Background(), types.NamespacedName{Name: "r2-n1"}, &node); err != nil {
			t.Fatal(err)
		}
		node.Spec.Taints = []corev1.Taint{{Key: "maintenance", Value: "true", Effect: corev1.TaintEffectNoSchedule}}
		if err := c.Update(context.Background(), &node); err != nil {
			t.Fatal(err)
		}
		wl := job("train", "dp0")
		wl.Spec.PodSets[0].Template.Spec.Tolerations = []corev1.Toleration{{Key: "maintenance", Operator: corev1.TolerationOpExists}}
		if err := c.Create(context.Background(), wl); err != nil {
			t.Fatal(err)
		}
		rep := explainOf(t, c, "train")
		if d := rep.PodSets[0].Domains[1]; !d.Fit || len(d.LeftOut) != 0 {
			t.Errorf("rack 2: %+v, want all 4 pods to fit", d)
		}
	})
}

func TestExplainWithoutTheCheck(t *testing.T) {
	wl := job("plain", "main")
	wl.Status.AdmissionChecks = nil
	rep := explainOf(t, lab(t, wl), "plain")
	if rep.Check != nil {
		t.Errorf("check %+v on a Workload without the gpudra check", rep.Check)
	}
	if rep.Now.State != string(kueue.CheckStateReady) {
		t.Errorf("now %+v, want Ready", rep.Now)
	}
}

func TestExplainShowsAShareRefusedUnderAQueue(t *testing.T) {
	rep := explainOf(t, lab(t, shareJob("40Gi", "10")...), "serve")
	if rep.Now.State != string(kueue.CheckStateRejected) || !strings.Contains(rep.Now.Message, "asks for 40Gi of its card's 80Gi (50 %) but compute 10") {
		t.Errorf("now %+v, want Rejected: the share's memory is the larger part", rep.Now)
	}
	rep = explainOf(t, lab(t, shareJob("40Gi", "50")...), "serve")
	if rep.Now.State != string(kueue.CheckStateReady) {
		t.Errorf("now %+v, want Ready", rep.Now)
	}
}

func TestExplainReportsWhyKueueReservedNoQuota(t *testing.T) {
	wl := job("dra", "dp0")
	wl.Status.Conditions = []metav1.Condition{{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionFalse, Reason: kueue.WorkloadInadmissible,
		Message: "devices.requests[0]: Invalid value: null: FirstAvailable device selection is not supported", LastTransitionTime: metav1.Now()}}
	rep := explainOf(t, lab(t, wl), "dra")
	if rep.QuotaReserved || rep.Quota == nil || rep.Quota.Status != "False" || rep.Quota.Reason != kueue.WorkloadInadmissible ||
		!strings.Contains(rep.Quota.Message, "FirstAvailable device selection is not supported") {
		t.Errorf("quota %+v, want Kueue's QuotaReserved=False Inadmissible and its message", rep.Quota)
	}
	if rep := explainOf(t, lab(t, job("train", "dp0")), "train"); rep.Quota != nil {
		t.Errorf("quota %+v with quota reserved, want none", rep.Quota)
	}
}

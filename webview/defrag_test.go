package webview

import (
	"context"
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// movable labels the fixture's pods on nodeA gpudra.dev/movable=true and makes their claims
// their own (from a template: a pod sharing a named claim does not move), so that a plan
// may move them to nodeB.
func movable(t *testing.T, f *fixture) {
	t.Helper()
	ctx := context.Background()
	for _, name := range []string{"train-0", "infer-0", "infer-1"} {
		p, err := f.kube.CoreV1().Pods(testNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Labels = map[string]string{api.LabelMovable: "true"}
		for k, c := range p.Spec.ResourceClaims {
			p.Spec.ResourceClaims[k] = corev1.PodResourceClaim{Name: c.Name, ResourceClaimTemplateName: ptr.To(oneGPUTemplate)}
			p.Status.ResourceClaimStatuses = append(p.Status.ResourceClaimStatuses, corev1.PodResourceClaimStatus{Name: c.Name, ResourceClaimName: c.ResourceClaimName})
		}
		if _, err := f.kube.CoreV1().Pods(testNS).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// The defragmentation page shows the planner's report and the plan that frees a node, to
// a caller who may read everything; a caller who may list pods in one namespace sees only
// that namespace's moves and no report, in the HTML and the JSON alike.
func TestDefragPageShowsTheReportAndTheMovesTheCallerMayRead(t *testing.T) {
	f := newFixture(t)
	withTeamB(t, f)
	movable(t, f)
	everything := grants{cluster: []string{"nodes", "pods", "resourceslices", "resourceclaims", "deviceclasses"}}
	for _, c := range []struct {
		name        string
		access      grants
		sees, lacks []string
	}{
		{"everything: the report, every node and every move", everything,
			[]string{`id="frag"`, `<b id="free-gpus">`, `data-cause="shares"`, `data-node="gpu-node-a"`, `data-node="gpu-node-b"`, `href="/pods/team-a/train-0"`, `href="/pods/team-a/infer-1"`, "to free gpu-node-a"},
			[]string{`id="hidden-moves"`, `id="hidden"`}},
		{"team-a's pods only: its moves, no report", grants{namespaces: []string{testNS}},
			[]string{`href="/pods/team-a/train-0"`, `id="hidden"`},
			[]string{`id="frag"`, `data-node=`, "to free gpu-node-a", `id="hidden-moves"`}},
		{"team-b's pods and the devices: no move of team-a's pods", grants{cluster: []string{"nodes", "resourceslices", "deviceclasses"}, namespaces: []string{otherNS}},
			[]string{`id="hidden-moves"`, `id="hidden"`, "No move of a pod you may list"},
			[]string{`id="frag"`, "train-0", "infer-0", "infer-1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			url := serveAs(t, f, c.access)
			page := get(t, url+"/defrag", http.StatusOK)
			contains(t, page, c.sees...)
			lacks(t, page, c.lacks...)
			data := get(t, url+"/defrag?format=json", http.StatusOK)
			if c.access.cluster == nil || len(c.access.namespaces) > 0 {
				lacks(t, data, `"fragmentation"`)
			} else {
				contains(t, data, `"fragmentation"`, `"Name":"train-0"`)
			}
			if len(c.access.namespaces) > 0 && c.access.namespaces[0] == otherNS {
				lacks(t, data, "train-0", "infer-0")
			}
		})
	}
	// Its nodes filter and page like the cluster page's.
	filtered := get(t, f.http.URL+"/defrag?node=node-b", http.StatusOK)
	contains(t, filtered, `data-node="gpu-node-b"`)
	lacks(t, filtered, `data-node="gpu-node-a"`)
	contains(t, get(t, f.http.URL+"/defrag?limit=1", http.StatusOK), `data-node="gpu-node-a"`, `rel="next" href="/defrag?limit=1&amp;page=2"`)
	contains(t, get(t, f.http.URL+"/defrag?limit=0", http.StatusBadRequest), "limit")
	// The cluster page links to it.
	contains(t, get(t, f.http.URL+"/", http.StatusOK), `href="/defrag"`, `id="defrag-link"`)
	// Requests in quick succession share one plan rather than each planning again.
	shared := func() *defragResult {
		get(t, f.http.URL+"/defrag", http.StatusOK)
		f.srv.defragMu.Lock()
		defer f.srv.defragMu.Unlock()
		return f.srv.defrag
	}
	if first, second := shared(), shared(); first == nil || first != second {
		t.Error("a second request planned again")
	}
}

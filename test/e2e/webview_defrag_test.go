//go:build e2e

package e2e

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/webview"
)

// TestWebViewDefragPageReportsTheLab: the web view's defragmentation page over the lab's API
// server measures the GPUs the cluster page counts, node by node, and its plan to free a node
// moves only pods that opted in (none when a node is free already).
func TestWebViewDefragPageReportsTheLab(t *testing.T) {
	inLane(t, clusterLane)
	view, err := webview.New(webview.Options{Kube: client, Dynamic: dyn()})
	if err != nil {
		t.Fatal(err)
	}
	if err := view.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(view)
	t.Cleanup(srv.Close)
	getJSON := func(path string, data any) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		if err := json.NewDecoder(resp.Body).Decode(&webview.JSONPage{Data: data}); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	var page webview.DefragPage
	getJSON("/defrag?format=json", &page)
	var cluster webview.ClusterPage
	getJSON("/?format=json", &cluster)
	if page.Report == nil || page.Plan == nil {
		t.Fatalf("no report or plan: %+v", page)
	}
	gpus, free := 0, 0
	for _, n := range page.Nodes {
		gpus += n.GPUs
		free += n.FreeGPUs
	}
	if gpus != page.Report.GPUs || free != page.Report.FreeGPUs || page.Report.GPUs != cluster.Summary.GPUs || page.Report.GPUs == 0 {
		t.Errorf("report %d GPUs (%d free), its nodes %d (%d free), the cluster page %d", page.Report.GPUs, page.Report.FreeGPUs, gpus, free, cluster.Summary.GPUs)
	}
	if page.Report.FreeNodes > 0 && (!page.Plan.Found || page.Plan.Evictions != 0) {
		t.Errorf("%d nodes are free, yet the plan to free one is %+v", page.Report.FreeNodes, page.Plan)
	}
	for _, m := range page.Plan.Moves {
		p, err := client.CoreV1().Pods(m.Pod.Namespace).Get(t.Context(), m.Pod.Name, metav1.GetOptions{})
		if err != nil {
			continue // ended since the plan was made
		}
		if p.Labels[api.LabelMovable] != "true" {
			t.Errorf("the plan moves %s, which did not opt in", m.Pod)
		}
	}
}

//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpudra/gpudra/queueing/dependencies"
	"github.com/gpudra/gpudra/webview"
)

// TestWebViewShowsWhatAJobRunsAfter: the web view over the lab's API server shows, on the
// page of a waiting step's Workload, what its Job runs after and where that stands, linked to
// the running step's Workload, as HTML and as JSON.
func TestWebViewShowsWhatAJobRunsAfter(t *testing.T) {
	inLane(t, clusterLane)
	ns, queue := dependencyLab(t, "webview-chain")
	view, err := webview.New(webview.Options{Kube: client, Dynamic: dyn()})
	if err != nil {
		t.Fatal(err)
	}
	if err := view.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(view)
	t.Cleanup(srv.Close)

	if err := pipelineStep(t, ns, "preprocess", queue); err != nil {
		t.Fatal(err)
	}
	if err := pipelineStep(t, ns, "train", queue, dependencies.RunAfterAnnotation, "preprocess"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "preprocess runs", jobRuns(ns, "preprocess", 1))
	eventually(t, time.Minute, "train waits for preprocess", gatedByDependencies(ns, "train", "preprocess (Running)"))
	first, err := workloadOfJob(t.Context(), ns, "preprocess")
	if err != nil {
		t.Fatal(err)
	}
	wl, err := workloadOfJob(t.Context(), ns, "train")
	if err != nil {
		t.Fatal(err)
	}
	page := srv.URL + "/workloads/" + ns + "/" + wl.Name
	want := `Runs after: <a href="/workloads/` + ns + `/` + first.Name + `">preprocess</a> (Running)`
	eventually(t, time.Minute, "train's Workload page shows what it runs after, linked", func(ctx context.Context) error {
		body, err := webGet(ctx, page)
		if err != nil {
			return err
		}
		if !strings.Contains(body, want) {
			return fmt.Errorf("page lacks %q", want)
		}
		return nil
	})
	body, err := webGet(t.Context(), page+"?format=json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ Data webview.WorkloadPage }
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	wantJSON := []webview.RunsAfter{{Status: dependencies.Status{Dependency: dependencies.Dependency{Kind: dependencies.KindJob, Name: "preprocess"},
		Phase: dependencies.PhaseRunning}, Workload: first.Name}}
	if !slices.Equal(got.Data.RunsAfter, wantJSON) {
		t.Errorf("runsAfter as JSON %+v, want %+v", got.Data.RunsAfter, wantJSON)
	}
}

// webGet is the body of a 200 answer to GET url.
func webGet(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %.300s", url, resp.Status, body)
	}
	return string(body), nil
}

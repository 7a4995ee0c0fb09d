//go:build e2e

package e2e

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gpudra/gpudra/webview"
)

// TestWebViewShowsTheLab: the web view over the lab's API server, in headless Chromium. The
// cluster page lists the lab's nodes and a running gang, and when a pod takes a GPU the free
// count drops without a reload.
func TestWebViewShowsTheLab(t *testing.T) {
	inLane(t, clusterLane)
	browser := os.Getenv("CHROMIUM")
	if browser == "" {
		browser = "/usr/bin/chromium"
	}
	if _, err := os.Stat(browser); err != nil {
		t.Fatalf("the web view test needs Chromium at %s (or $CHROMIUM): run make browser: %v", browser, err)
	}
	ctx := t.Context()
	view, err := webview.New(webview.Options{Kube: client, Dynamic: dyn()})
	if err != nil {
		t.Fatal(err)
	}
	if err := view.Start(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: view, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	url := "http://" + l.Addr().String()

	ns := namespace(t, "e2e-webview")
	apply(t, oneGPUTemplate(ns)+`
---
apiVersion: batch/v1
kind: Job
metadata: {name: viewed, namespace: `+ns+`}
spec:
  parallelism: 2
  completions: 2
  template:
    spec:
      restartPolicy: Never
      resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
      containers:
      - name: worker
        image: registry.k8s.io/pause:3.10
        resources: {claims: [{name: gpu}]}
`)
	eventually(t, 2*time.Minute, "the job's two workers run", jobRuns(ns, "viewed", 2))

	actx, cancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1400, 1000))...)
	defer cancel()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting %s: %v", browser, err)
	}
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, time.Minute)
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		s, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("reading %s: %v", sel, err)
		}
		return s
	}
	do("the cluster page", chromedp.Navigate(url+"/"), chromedp.WaitVisible(chromedp.CSS("#nodes")),
		chromedp.WaitVisible(chromedp.CSS("#live.on")), chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`))
	nodes := text("#nodes")
	for _, n := range state.Nodes {
		if !strings.Contains(nodes, n.Name) {
			t.Errorf("the nodes table lacks the lab's node %s", n.Name)
		}
	}
	// The gang's two workers are listed under their Job, both running.
	do("the running gang", chromedp.Poll[chromedp.Void](`document.querySelector(".gangs") !== null &&
		document.querySelector(".gangs").textContent.includes("`+ns+`/job/viewed") &&
		document.querySelector(".gangs").textContent.includes("2 / 2")`, chromedp.WithPollingTimeout(time.Minute)))
	if dir := os.Getenv("GPUDRA_ARTIFACTS"); dir != "" {
		do("a screenshot", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			png, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Join(dir, "webview"), 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, "webview", "lab-cluster.png"), png, 0o644)
		}))
	}
	before, err := strconv.Atoi(strings.TrimSpace(text("#sum-free")))
	if err != nil {
		t.Fatal(err)
	}

	// A pod taking one more whole GPU: the page's free count drops in place.
	apply(t, `
apiVersion: v1
kind: Pod
metadata: {name: one-more, namespace: `+ns+`}
spec:
  resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
  containers:
  - name: worker
    image: registry.k8s.io/pause:3.10
    resources: {claims: [{name: gpu}]}
`)
	do("the free count after a claim was allocated", chromedp.Poll[chromedp.Void](
		`Number(document.getElementById("sum-free").textContent) === `+strconv.Itoa(before-1), chromedp.WithPollingTimeout(2*time.Minute)))
	notReloaded, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`window.notReloaded === true`))
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if !notReloaded {
		t.Error("the page was reloaded instead of updated in place")
	}
}

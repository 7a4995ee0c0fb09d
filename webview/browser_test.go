//go:build e2e

package webview

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// chromiumPath is the browser the test drives: $CHROMIUM, else Debian's chromium.
func chromiumPath(t *testing.T) string {
	t.Helper()
	path := os.Getenv("CHROMIUM")
	if path == "" {
		path = "/usr/bin/chromium"
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the browser test needs Chromium at %s (or $CHROMIUM): install it with hack/install-chromium.sh (apt-get install -y chromium): %v", path, err)
	}
	return path
}

// artifactDir is where the screenshots go: $GPUDRA_ARTIFACTS/webview, else a temporary folder.
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if a := os.Getenv("GPUDRA_ARTIFACTS"); a != "" {
		dir = filepath.Join(a, "webview")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestBrowser(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	// A pending pod whose claim wants a whole node of GPUs, for the explain page.
	big := wholeClaim("big-0-gpus")
	big.Spec.Devices.Requests[0].Exactly.Count = 8
	if _, err := f.kube.ResourceV1().ResourceClaims(testNS).Create(ctx, big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.kube.CoreV1().Pods(testNS).Create(ctx, gpuPod("big-0", "big", "", big.Name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := artifactDir(t)
	t.Logf("screenshots in %s", dir)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.WindowSize(1400, 1000),
		chromedp.Flag("lang", "en-US"),
	)
	actx, cancel := chromedp.NewExecAllocator(ctx, opts...)
	defer cancel()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	// The first run starts the browser, which lives as long as bctx: no timeout on it.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting %s: %v", chromiumPath(t), err)
	}
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			png, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644)
		})
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
	visible := func(sel string) chromedp.Action[chromedp.Void] { return chromedp.WaitVisible(chromedp.CSS(sel)) }
	poll := func(expr string) chromedp.Action[chromedp.Void] {
		return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(20*time.Second))
	}

	// The cluster page: both nodes, the running gang, and the SSE stream connected.
	do("the cluster page",
		chromedp.Navigate(f.http.URL+"/"),
		visible("#nodes"),
		visible("#live.on"),
		chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`),
	)
	nodes := text("#nodes")
	for _, want := range []string{nodeA, nodeB, "NVIDIA H100 80GB HBM3", "6 / 8", "7 / 8"} {
		if !strings.Contains(nodes, want) {
			t.Errorf("the nodes table lacks %q: %s", want, nodes)
		}
	}
	gangs := text(".gangs")
	for _, want := range []string{"team-a/job/infer", "infer-0", "infer-1", "Running", "2 / 2", "gpu-1-share", "team-a/job/train"} {
		if !strings.Contains(gangs, want) {
			t.Errorf("the pods table lacks %q: %s", want, gangs)
		}
	}
	if got := text("#sum-free"); got != "13" {
		t.Errorf("free whole GPUs %s, want 13", got)
	}
	do("the cluster page's screenshot", shot("cluster"))

	// A claim taking a GPU of node b: the page updates without a reload.
	claim := wholeClaim("serve-0-gpu")
	f.allocate(t, claim, nodeB, "")
	if _, err := f.kube.ResourceV1().ResourceClaims(testNS).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	do("the cluster page after a claim was created", poll(`document.getElementById("sum-free").textContent === "12"`))
	notReloaded, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`window.notReloaded === true`))
	if err != nil {
		t.Fatal(err)
	}
	if !notReloaded {
		t.Error("the page was reloaded instead of updated in place")
	}
	if got := text(`tr[data-node="gpu-node-b"]`); !strings.Contains(got, "6 / 8") {
		t.Errorf("node b's row after the claim: %s", got)
	}

	// The node page: whole GPU, the two shares with their bars, NVLink.
	do("the node page", chromedp.Navigate(f.http.URL+"/nodes/"+nodeA), visible("#gpus"), visible("#live.on"), shot("node"))
	gpus := text("#gpus")
	for _, want := range []string{"team-a/train-0-gpu", "pod/train-0", "team-a/infer-0-share", "team-a/infer-1-share", "memory 20Gi of", "compute 50 of 100"} {
		if !strings.Contains(gpus, want) {
			t.Errorf("the GPU table lacks %q: %s", want, gpus)
		}
	}
	if got := text("#nvlink"); !strings.Contains(got, "●") {
		t.Errorf("the NVLink matrix shows no clique: %s", got)
	}

	// The queues page.
	do("the queues page", chromedp.Navigate(f.http.URL+"/queues"), visible("#clusterqueues"), shot("queues"))
	if got := text("#pending"); !strings.Contains(got, "the best rack fits 7 now") {
		t.Errorf("the pending Workloads lack the check's message: %s", got)
	}
	do("the workload page", chromedp.Click(chromedp.CSS("#pending a.workload")), visible("#podsets"), shot("workload"))
	if got := text("#waiting"); !strings.Contains(got, "admission check gpudra-topology is Pending") {
		t.Errorf("the workload page does not say why it waits: %s", got)
	}

	// The pod page explains the pending claim, and fetches its content again when the
	// cluster changes.
	do("the pod page", chromedp.Navigate(f.http.URL+"/pods/team-a/big-0"), visible(".claimview"), visible("#live.on"), shot("pod"))
	do("the pod page's explanation", poll(`document.querySelector(".claimview").textContent.includes("It fits on 0 of 2 nodes")`))
	if err := f.kube.ResourceV1().ResourceClaims(testNS).Delete(ctx, claim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	do("the pod page after a claim was deleted", poll(`Number(document.body.dataset.updates) > 0`))

	// The claim page of an allocated share.
	do("the claim page", chromedp.Navigate(f.http.URL+"/claims/team-a/infer-1-share"), visible(".results"), shot("claim"))
	if got := text(".results"); !strings.Contains(got, "gpu-1-share") {
		t.Errorf("the claim page: %s", got)
	}
}

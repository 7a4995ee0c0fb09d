package webview

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

func get(t *testing.T, url string, want int) string {
	t.Helper()
	status, body := fetch(t, url)
	if status != want {
		t.Fatalf("GET %s: status %d, want %d:\n%s", url, status, want, body)
	}
	return body
}

// fetch gets url and returns its status and body, whatever the status.
func fetch(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func contains(t *testing.T, page string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(page, w) {
			t.Errorf("page lacks %q:\n%s", w, page)
		}
	}
}

// card reads one of the cluster page's totals by its id.
func card(t *testing.T, page, id string) string {
	t.Helper()
	m := regexp.MustCompile(`<b id="` + id + `">([^<]*)</b>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no card %s in:\n%s", id, page)
	}
	return m[1]
}

func TestClusterPage(t *testing.T) {
	f := newFixture(t)
	page := get(t, f.http.URL+"/", http.StatusOK)
	// 16 GPUs: one whole and one shared on node a, one unhealthy on node b.
	for id, want := range map[string]string{"sum-nodes": "2", "sum-gpus": "16", "sum-free": "13", "sum-free-nodes": "0", "sum-unhealthy": "1"} {
		if got := card(t, page, id); got != want {
			t.Errorf("card %s = %s, want %s", id, got, want)
		}
	}
	contains(t, page,
		"<td>NVIDIA H100 80GB HBM3</td><td>2</td><td>16</td><td>1</td><td>1</td><td>0</td><td>0</td><td>13</td><td>1</td>",
		`href="/nodes/gpu-node-a"`, `href="/nodes/gpu-node-b"`,
		`<span class="gpu whole" title="gpu-0: whole">`, `<span class="gpu shared" title="gpu-1: shared">`,
		`<span class="gpu unhealthy" title="gpu-7: unhealthy">`,
		"gpu-7-share", "gpu.gpudra.dev/unhealthy=XidCritical:NoSchedule",
		"team-a/job/infer", "team-a/job/train", `href="/pods/team-a/infer-1"`, `href="/claims/team-a/infer-0-share"`,
		`src="/static/app.js"`, `data-events="/events"`)
	if strings.Count(page, `class="gpu free"`) != 13+1 { // and one in the legend
		t.Errorf("want 13 free GPUs in the strips:\n%s", page)
	}
}

func TestNodePage(t *testing.T) {
	f := newFixture(t)
	page := get(t, f.http.URL+"/nodes/"+nodeA, http.StatusOK)
	contains(t, page, "Node gpu-node-a", "rack rack-1", "6 of 8 GPUs free",
		`<tr data-gpu="0" class="whole">`, `<tr data-gpu="1" class="shared">`, `<tr data-gpu="2" class="free">`,
		`whole: <a class="claim" href="/claims/team-a/train-0-gpu">team-a/train-0-gpu</a> <a class="pod" href="/pods/team-a/train-0">pod/train-0</a>`,
		`href="/claims/team-a/infer-0-share"`, `href="/claims/team-a/infer-1-share"`,
		"memory 20Gi of ", "memory 40Gi of ", "compute 30 of 100", "compute 50 of 100",
		`<td class="clique" title="clique">●</td>`, "clique nvlink-0-1-2-3-4-5-6-7")
	// The two shares' bars: 30% and 50% compute.
	contains(t, page, `class="fill compute w-30"`, `class="fill compute w-50"`)

	page = get(t, f.http.URL+"/nodes/"+nodeB, http.StatusOK)
	contains(t, page, `<tr data-gpu="7" class="unhealthy">`, `<span class="badge bad">gpu.gpudra.dev/unhealthy=XidCritical:NoSchedule</span>`)

	get(t, f.http.URL+"/nodes/no-such-node", http.StatusNotFound)
}

func TestQueuesPage(t *testing.T) {
	f := newFixture(t)
	page := get(t, f.http.URL+"/queues", http.StatusOK)
	contains(t, page, `<tr data-queue="team-a">`, `<tr data-queue="team-b">`, "<td>research</td>", "team-a, team-b",
		"6.5 of 8", "2.5 of 8", "unlimited",
		"team-a/job-big-train-1a2b3", "(job/big-train)", "default → team-a", `<span class="badge ok">reserved</span>`,
		`<span class="badge check Pending">Pending</span>`, "pod set main: 16 pods need one rack; the best rack fits 7 now")
}

func TestQueuesPageWithoutCohortAccess(t *testing.T) {
	f := newFixture(t)
	dyn := newDynamic(t)
	dyn.PrependReactor("list", "cohorts", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: KueueGroupVersion.Group, Resource: "cohorts"}, "", nil)
	})
	defer func(d time.Duration) { KueueSyncTimeout = d }(KueueSyncTimeout)
	KueueSyncTimeout = 300 * time.Millisecond
	srv, err := New(Options{Kube: f.kube, Dynamic: dyn})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	contains(t, get(t, hs.URL+"/queues", http.StatusOK), "Not read yet (check that these can be listed and watched): cohorts", `<tr data-queue="team-a">`)
	contains(t, get(t, hs.URL+"/", http.StatusOK), "sum-free")
}

func TestQueuesPageWithoutKueue(t *testing.T) {
	kube := fake.NewClientset()
	srv, err := New(Options{Kube: kube})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	contains(t, get(t, hs.URL+"/queues", http.StatusOK), "does not serve Kueue")
	contains(t, get(t, hs.URL+"/", http.StatusOK), "No ResourceSlices of gpu.gpudra.dev yet.", "No pod has a ResourceClaim.")
}

func TestClaimPage(t *testing.T) {
	f := newFixture(t)
	page := get(t, f.http.URL+"/claims/team-a/infer-1-share", http.StatusOK)
	contains(t, page, "Claim team-a/infer-1-share", `<span class="badge ok">allocated</span>`,
		"gpu.gpudra.dev/gpu-node-a/gpu-1-share", `<a href="/nodes/gpu-node-a">gpu-node-a</a>`, "compute=50, memory=40Gi",
		`href="/pods/team-a/infer-1"`, "gpu-share.gpudra.dev")
	get(t, f.http.URL+"/claims/team-a/nope", http.StatusNotFound)
}

func TestPodPageExplainsPending(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	big := wholeClaim("big-0-gpus")
	big.Spec.Devices.Requests[0].Exactly.Count = 8
	one := wholeClaim("big-0-one")
	if _, err := f.kube.ResourceV1().ResourceClaims(testNS).Create(ctx, big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.kube.ResourceV1().ResourceClaims(testNS).Create(ctx, one, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.kube.CoreV1().Pods(testNS).Create(ctx, gpuPod("big-0", "big", "", big.Name, one.Name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var page string
	eventually(t, func() bool {
		// The pod and its claims reach their informers in any order: the
		// page is a 404 until the pod has arrived.
		var status int
		status, page = fetch(t, f.http.URL+"/pods/team-a/big-0")
		return status == http.StatusOK && strings.Contains(page, "big-0-one") && !strings.Contains(page, "not found")
	})
	// Node a has 6 GPUs free, node b 7 healthy ones: 8 fit nowhere, 1 fits on both.
	contains(t, page, "Pod team-a/big-0", "not scheduled", "rule out none of the 2 nodes",
		`data-claim="team-a/big-0-gpus"`, "It fits on 0 of 2 nodes with devices now.",
		"It fits on 2 of 2 nodes with devices now.", "team-a/train-0-gpu")
	get(t, f.http.URL+"/pods/team-a/nope", http.StatusNotFound)
}

func eventually(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sse reads events from the stream, sending each event's name.
func sse(t *testing.T, url string) <-chan string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	out := make(chan string, 16)
	go func() {
		defer resp.Body.Close()
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if name, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				out <- name
			}
		}
	}()
	return out
}

func nextEvent(t *testing.T, events <-chan string, want string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatalf("stream ended before event %q", want)
			}
			if e == want {
				return
			}
		case <-timeout:
			t.Fatalf("no event %q within 10s", want)
		}
	}
}

func TestLiveUpdate(t *testing.T) {
	f := newFixture(t)
	events := sse(t, f.http.URL+"/events")
	nextEvent(t, events, "hello")

	frag := get(t, f.http.URL+"/?fragment=1", http.StatusOK)
	if strings.Contains(frag, "<html") || !strings.Contains(frag, "<h1>Cluster</h1>") {
		t.Fatalf("the fragment is not the page's content alone:\n%s", frag)
	}
	if got := card(t, frag, "sum-free"); got != "13" {
		t.Fatalf("free = %s before, want 13", got)
	}

	claim := wholeClaim("serve-0-gpu")
	f.allocate(t, claim, nodeB, "")
	if _, err := f.kube.ResourceV1().ResourceClaims(testNS).Create(context.Background(), claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, events, "changed")
	frag = get(t, f.http.URL+"/?fragment=1", http.StatusOK)
	if got := card(t, frag, "sum-free"); got != "12" {
		t.Fatalf("free = %s after a claim took a GPU of node b, want 12", got)
	}
	contains(t, get(t, f.http.URL+"/nodes/"+nodeB, http.StatusOK), `href="/claims/team-a/serve-0-gpu"`)
}

func TestBasePathAndAssets(t *testing.T) {
	f := newFixture(t)
	srv, err := New(Options{Kube: f.kube, Base: "/dashboard/"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	page := get(t, hs.URL+"/dashboard/", http.StatusOK)
	contains(t, page, `href="/dashboard/nodes/gpu-node-a"`, `src="/dashboard/static/app.js"`, `data-events="/dashboard/events"`)
	contains(t, get(t, hs.URL+"/dashboard/static/app.js", http.StatusOK), "EventSource")
	contains(t, get(t, hs.URL+"/dashboard/static/style.css", http.StatusOK), ".gpu.whole")
	get(t, hs.URL+"/dashboard/healthz", http.StatusOK)
	get(t, hs.URL+"/elsewhere", http.StatusNotFound)
}

func TestNotReadyBeforeStart(t *testing.T) {
	srv, err := New(Options{Kube: fake.NewClientset()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	get(t, hs.URL+"/", http.StatusServiceUnavailable)
	get(t, hs.URL+"/healthz", http.StatusServiceUnavailable)
}

func TestPagesAsJSON(t *testing.T) {
	f := newFixture(t)
	var cluster struct {
		Title string
		Data  ClusterPage
	}
	if err := json.Unmarshal([]byte(get(t, f.http.URL+"/?format=json", http.StatusOK)), &cluster); err != nil {
		t.Fatal(err)
	}
	if s := cluster.Data.Summary; s.GPUs != 16 || s.Free != 13 || len(cluster.Data.Nodes) != 2 {
		t.Errorf("cluster summary %+v, want 16 GPUs, 13 free, on 2 nodes", s)
	}

	req, err := http.NewRequest(http.MethodGet, f.http.URL+"/claims/team-a/infer-1-share", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var claim struct{ Data Explain }
	if err := json.NewDecoder(resp.Body).Decode(&claim); err != nil {
		t.Fatal(err)
	}
	if c := claim.Data.Claims; len(c) != 1 || !c[0].Allocated || len(c[0].Results) != 1 || c[0].Results[0].Node != nodeA || c[0].Results[0].Consumed != "compute=50, memory=40Gi" {
		t.Errorf("claim infer-1-share as JSON: %+v", claim.Data)
	}

	status, body := fetch(t, f.http.URL+"/queues?format=xml")
	if status != http.StatusBadRequest || !strings.Contains(body, "accepted values are html, json") {
		t.Errorf("?format=xml: %d %s", status, body)
	}
}

// The claim page shows what the kubelet plugin last wrote of a device's usage.
func TestClaimPageShowsUsage(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	claim, err := f.kube.ResourceV1().ResourceClaims(testNS).Get(ctx, "infer-1-share", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := claim.Status.Allocation.Devices.Results[0]
	claim.Status.Devices = []resourceapi.AllocatedDeviceStatus{{Driver: r.Driver, Pool: r.Pool, Device: r.Device, ShareID: (*string)(r.ShareID),
		Data: &runtime.RawExtension{Raw: []byte(`{"usage":{"memoryUsedBytes":3221225472,"memoryLimitBytes":42949672960,"smUtilizationPercent":25,"heldBackSeconds":95,"processes":2,"observedAt":"2026-01-02T03:04:05Z"}}`)}}}
	if _, err := f.kube.ResourceV1().ResourceClaims(testNS).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := "uses 3.0 of 40.0 GiB memory, SM 25%, held back 1m35s by High shares, 2 processes, as of 2026-01-02T03:04:05Z"
	eventually(t, func() bool {
		return strings.Contains(get(t, f.http.URL+"/claims/team-a/infer-1-share", http.StatusOK), want)
	})
	contains(t, get(t, f.http.URL+"/pods/team-a/infer-1", http.StatusOK), want)
}

func TestClusterPageFiltersAndPages(t *testing.T) {
	f := newFixture(t)
	// One node per page: node b on page 2, a link back to page 1.
	page := get(t, f.http.URL+"/?limit=1&page=2", http.StatusOK)
	contains(t, page, `data-node="`+nodeB+`"`, "page 2 of 2", `href="/?limit=1"`)
	lacks(t, page, `data-node="`+nodeA+`"`)

	var cluster struct{ Data ClusterPage }
	if err := json.Unmarshal([]byte(get(t, f.http.URL+"/?format=json&node="+nodeA+"&namespace=team-a", http.StatusOK)), &cluster); err != nil {
		t.Fatal(err)
	}
	if d := cluster.Data; len(d.Nodes) != 1 || d.Nodes[0].Name != nodeA || d.Summary.GPUs != 8 || len(d.Gangs) != 2 {
		t.Errorf("node %s of namespace team-a: %d nodes, %d GPUs, %d gangs; want 1, 8, 2", nodeA, len(d.Nodes), d.Summary.GPUs, len(d.Gangs))
	}
	page = get(t, f.http.URL+"/?model=no-such-gpu", http.StatusOK)
	lacks(t, page, `data-node="`+nodeA+`"`, `data-node="`+nodeB+`"`)

	for _, bad := range []string{"limit=0", "limit=x", "page=-1", "limit=1001"} {
		status, body := fetch(t, f.http.URL+"/?"+bad)
		if status != http.StatusBadRequest || !strings.Contains(body, "want a whole number from") {
			t.Errorf("?%s: %d, want 400 naming the accepted range", bad, status)
		}
	}
}

func TestQueuesPageFilters(t *testing.T) {
	f := newFixture(t)
	contains(t, get(t, f.http.URL+"/queues?queue=team-a", http.StatusOK), `data-queue="team-a"`, "job-big-train-1a2b3")
	page := get(t, f.http.URL+"/queues?queue=team-b", http.StatusOK)
	contains(t, page, `data-queue="team-b"`)
	lacks(t, page, `data-queue="team-a"`, "job-big-train-1a2b3")
	lacks(t, get(t, f.http.URL+"/queues?namespace=team-b", http.StatusOK), "job-big-train-1a2b3")
}

// Kueue's objects are converted from unstructured once, as the informer stores them, not
// on every page.
func TestKueueObjectsAreStoredTyped(t *testing.T) {
	f := newFixture(t)
	items := f.srv.src.(*informerSource).kueueInfs[workloadsGVR].GetStore().List()
	if len(items) == 0 {
		t.Fatal("no Workload cached")
	}
	for _, it := range items {
		if _, ok := it.(*kueue.Workload); !ok {
			t.Errorf("the cache holds a %T, want *v1beta2.Workload", it)
		}
	}
}

// Tabs share one model of the cluster until the next burst of changes.
func TestModelIsBuiltOncePerChange(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	snapshot := func() *Cluster {
		c, err := f.srv.snapshot(&scope{ctx: ctx, seen: map[accessKey]bool{}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// Two requests with no change between them get the same model (the fixture's own
	// changes may still be arriving at first).
	var first *Cluster
	eventually(t, func() bool {
		first = snapshot()
		return snapshot() == first
	})
	if _, err := f.kube.CoreV1().Pods(testNS).Create(ctx, gpuPod("late-0", "late", nodeB, "train-0-gpu"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool {
		for _, p := range snapshot().Pods {
			if p.Name == "late-0" {
				return true
			}
		}
		return false
	})
}

// The workload page says what gpudra explain workload says: queue, quota, admission
// checks, pod sets and why the Workload waits; the queues page and the pages of the
// Workload's pods link to it.
func TestWorkloadPage(t *testing.T) {
	f := newFixture(t)
	const path = "/workloads/team-a/job-big-train-1a2b3"
	page := get(t, f.http.URL+path, http.StatusOK)
	contains(t, page, "Workload team-a/job-big-train-1a2b3", "default → team-a", "job/big-train", "quota reserved",
		"Waits: admission check gpudra-topology is Pending: pod set main: 16 pods need one rack; the best rack fits 7 now",
		`<p id="priority">Priority 100 (no priority class)</p>`,
		`<tr data-podset="main">`, "<td>main</td><td>2</td><td>one-gpu</td>", "2 of 2",
		`would answer <span class="badge check Ready">Ready</span>`)

	var wl struct{ Data WorkloadPage }
	if err := json.Unmarshal([]byte(get(t, f.http.URL+path+"?format=json", http.StatusOK)), &wl); err != nil {
		t.Fatal(err)
	}
	e := wl.Data.Explanation
	if wl.Data.Queue != "default" || wl.Data.ClusterQueue != "team-a" || len(wl.Data.Checks) != 1 || wl.Data.Checks[0].State != "Pending" ||
		wl.Data.Priority == nil || wl.Data.Priority.Value != 100 || wl.Data.Priority.Kind != "" ||
		e == nil || !e.QuotaReserved || len(e.PodSets) != 1 || e.PodSets[0].Count != 2 || e.PodSets[0].Domains[0].Fits != 2 || e.Now.State != "Ready" {
		t.Errorf("workload as JSON: %+v (explanation %+v)", wl.Data, e)
	}
	get(t, f.http.URL+"/workloads/team-a/nope", http.StatusNotFound)

	contains(t, get(t, f.http.URL+"/queues", http.StatusOK), `href="`+path+`"`)
	if _, err := f.kube.CoreV1().Pods(testNS).Create(context.Background(), gpuPod("big-train-0", "big-train", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool {
		status, page := fetch(t, f.http.URL+"/pods/team-a/big-train-0")
		return status == http.StatusOK && strings.Contains(page, `href="`+path+`"`)
	})
	lacks(t, get(t, f.http.URL+"/pods/team-a/train-0", http.StatusOK), "/workloads/")
}

package webview

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// grants is an Access that allows listing the named resources cluster-wide and the
// namespaced ones in the named namespaces.
type grants struct {
	cluster    []string
	namespaces []string
	fail       error
}

func (g grants) CanList(_ context.Context, gr schema.GroupResource, ns string) (bool, error) {
	if g.fail != nil {
		return false, g.fail
	}
	if ns == "" {
		return slices.Contains(g.cluster, gr.Resource), nil
	}
	return slices.Contains(g.namespaces, ns), nil
}

const otherNS = "team-b"

// withTeamB adds a claim, a pod and a Workload in a second namespace to the fixture.
func withTeamB(t *testing.T, f *fixture) {
	t.Helper()
	ctx := context.Background()
	claim := wholeClaim("serve-0-gpu")
	claim.Namespace = otherNS
	f.allocate(t, claim, nodeB, "serve-0")
	pod := gpuPod("serve-0", "serve", nodeB, claim.Name)
	pod.Namespace = otherNS
	if _, err := f.kube.ResourceV1().ResourceClaims(otherNS).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.kube.CoreV1().Pods(otherNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wl := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: otherNS, Name: "job-serve-9z8y7"}, Spec: kueue.WorkloadSpec{QueueName: "default"}}
	if _, err := f.dyn.Resource(workloadsGVR).Namespace(otherNS).Create(ctx, toUnstructured(t, wl, "Workload"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool {
		page := get(t, f.http.URL+"/queues", http.StatusOK)
		return strings.Contains(page, "job-serve-9z8y7") && strings.Contains(get(t, f.http.URL+"/", http.StatusOK), "team-b/job/serve")
	})
}

// serveAs serves the fixture's cluster to a caller with access a.
func serveAs(t *testing.T, f *fixture, a Access) string {
	t.Helper()
	srv, err := New(Options{Kube: f.kube, Dynamic: f.dyn, Access: func(*http.Request) Access { return a }})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return hs.URL
}

func lacks(t *testing.T, page string, unwanted ...string) {
	t.Helper()
	for _, u := range unwanted {
		if strings.Contains(page, u) {
			t.Errorf("page shows %q:\n%s", u, page)
		}
	}
}

func TestCallerSeesOnlyWhatItMayList(t *testing.T) {
	f := newFixture(t)
	withTeamB(t, f)
	teamA := []string{"team-a/job/train", "team-a/job/infer", "train-0-gpu", "infer-0-share", "job-big-train-1a2b3"}
	for _, c := range []struct {
		name   string
		access grants
		// gpus and free are the cluster page's totals.
		gpus, free string
		sees       []string
	}{
		{
			name:   "one namespace only: its claims, pods and Workloads, no nodes, devices or queues",
			access: grants{namespaces: []string{otherNS}},
			gpus:   "0", free: "0",
		},
		{
			name:   "one namespace and the cluster's devices: GPUs held elsewhere show as free",
			access: grants{cluster: []string{"nodes", "resourceslices", "deviceclasses"}, namespaces: []string{otherNS}},
			gpus:   "16", free: "14",
			sees: []string{`href="/nodes/gpu-node-a"`},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			url := serveAs(t, f, c.access)
			page := get(t, url+"/", http.StatusOK)
			if got := card(t, page, "sum-gpus"); got != c.gpus {
				t.Errorf("GPUs %s, want %s", got, c.gpus)
			}
			if got := card(t, page, "sum-free"); got != c.free {
				t.Errorf("free GPUs %s, want %s", got, c.free)
			}
			contains(t, page, append([]string{"team-b/job/serve", `href="/claims/team-b/serve-0-gpu"`, `id="hidden"`}, c.sees...)...)
			lacks(t, page, teamA...)

			queues := get(t, url+"/queues", http.StatusOK)
			contains(t, queues, "job-serve-9z8y7")
			lacks(t, queues, append(teamA, `data-queue="team-a"`, "<td>research</td>")...)

			// The JSON of each page holds what its HTML does, no more.
			for _, path := range []string{"/", "/queues", "/pods/team-b/serve-0", "/workloads/team-b/job-serve-9z8y7"} {
				data := get(t, url+path+"?format=json", http.StatusOK)
				contains(t, data, `"team-b`, `"hidden":[`)
				lacks(t, data, teamA...)
			}
			contains(t, get(t, url+"/claims/team-b/serve-0-gpu", http.StatusOK), `<span class="badge ok">allocated</span>`)
			contains(t, get(t, url+"/pods/team-b/serve-0", http.StatusOK), "Pod team-b/serve-0")
			// Another namespace's objects are not found, as if they did not exist.
			lacks(t, get(t, url+"/claims/team-a/train-0-gpu", http.StatusNotFound), "gpu-node-a/gpu-0")
			get(t, url+"/pods/team-a/train-0", http.StatusNotFound)
			lacks(t, get(t, url+"/workloads/team-a/job-big-train-1a2b3", http.StatusNotFound), "16 pods need one rack", "one-gpu")
			contains(t, get(t, url+"/workloads/team-b/job-serve-9z8y7", http.StatusOK), "Workload team-b/job-serve-9z8y7", "Waits: Kueue has not reserved quota")
			if c.gpus != "0" {
				node := get(t, url+"/nodes/"+nodeA, http.StatusOK)
				contains(t, node, "8 of 8 GPUs free")
				lacks(t, node, teamA...)
			} else {
				get(t, url+"/nodes/"+nodeA, http.StatusNotFound)
			}
		})
	}
}

func TestEveryNamespaceSeesEverything(t *testing.T) {
	f := newFixture(t)
	url := serveAs(t, f, grants{cluster: []string{"nodes", "pods", "resourceslices", "resourceclaims", "deviceclasses",
		"clusterqueues", "cohorts", "localqueues", "workloads", "admissionchecks"}})
	page := get(t, url+"/", http.StatusOK)
	if got := card(t, page, "sum-free"); got != "13" {
		t.Errorf("free GPUs %s, want 13", got)
	}
	contains(t, page, "team-a/job/train")
	lacks(t, page, `id="hidden"`)
	contains(t, get(t, url+"/queues", http.StatusOK), `<tr data-queue="team-a">`, "job-big-train-1a2b3")
}

func TestAccessCheckFailureIsAServerError(t *testing.T) {
	f := newFixture(t)
	url := serveAs(t, f, grants{fail: errors.New("subjectaccessreviews: connection refused")})
	for _, path := range []string{"/", "/nodes/" + nodeA, "/queues", "/claims/team-a/train-0-gpu", "/pods/team-a/train-0", "/workloads/team-a/job-big-train-1a2b3"} {
		contains(t, get(t, url+path, http.StatusInternalServerError), "connection refused")
	}
}

package webview

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/queueing/dependencies"
)

const bigTrainPath = "/workloads/team-a/job-big-train-1a2b3"

// withPipeline makes the fixture's Job big-train run after step-1 (Complete, with a
// Workload), step-0 (running, without one) and fetch (not created).
func withPipeline(t *testing.T, f *fixture) {
	t.Helper()
	ctx := context.Background()
	jobs := []*batchv1.Job{
		{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "big-train",
			Annotations: map[string]string{dependencies.RunAfterAnnotation: "step-1,step-0,fetch"}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "step-1"},
			Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "step-0"}, Spec: batchv1.JobSpec{Suspend: ptr.To(false)}},
	}
	for _, j := range jobs {
		if _, err := f.kube.BatchV1().Jobs(testNS).Create(ctx, j, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	wl := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "job-step-1-4d5e6",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "step-1", UID: "uid-step-1"}}},
		Spec: kueue.WorkloadSpec{QueueName: "default"}}
	if _, err := f.dyn.Resource(workloadsGVR).Namespace(testNS).Create(ctx, toUnstructured(t, wl, "Workload"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool { return strings.Contains(get(t, f.http.URL+"/queues", http.StatusOK), wl.Name) })
}

// The workload page shows what the Workload's Job runs after, as gpudra explain does, each
// job with where it stands and a link to its Workload where Kueue made one; the JSON has
// the same chain.
func TestWorkloadPageShowsWhatItsJobRunsAfter(t *testing.T) {
	f := newFixture(t)
	withPipeline(t, f)
	contains(t, get(t, f.http.URL+bigTrainPath, http.StatusOK),
		`<p id="runs-after">Runs after: <a href="/workloads/team-a/job-step-1-4d5e6">step-1</a> (Complete), step-0 (Running), fetch (not created yet)</p>`)

	var page struct{ Data WorkloadPage }
	if err := json.Unmarshal([]byte(get(t, f.http.URL+bigTrainPath+"?format=json", http.StatusOK)), &page); err != nil {
		t.Fatal(err)
	}
	want := []RunsAfter{
		{Status: dependencies.Status{Dependency: dependencies.Dependency{Kind: dependencies.KindJob, Name: "step-1"}, Phase: dependencies.PhaseComplete}, Workload: "job-step-1-4d5e6"},
		{Status: dependencies.Status{Dependency: dependencies.Dependency{Kind: dependencies.KindJob, Name: "step-0"}, Phase: dependencies.PhaseRunning}},
		{Status: dependencies.Status{Dependency: dependencies.Dependency{Kind: dependencies.KindJob, Name: "fetch"}, Phase: dependencies.PhaseNotCreated}},
	}
	if !slices.Equal(page.Data.RunsAfter, want) {
		t.Errorf("runsAfter as JSON %+v, want %+v", page.Data.RunsAfter, want)
	}
	// A Job without dependencies: no chain.
	lacks(t, get(t, f.http.URL+"/workloads/team-a/job-step-1-4d5e6", http.StatusOK), "Runs after")

	// A chain with a JobSet, which the view does not read: the page without the chain,
	// and without an error.
	job, err := f.kube.BatchV1().Jobs(testNS).Get(context.Background(), "big-train", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	job.Annotations[dependencies.RunAfterAnnotation] = "step-1,jobset/sweep"
	if _, err := f.kube.BatchV1().Jobs(testNS).Update(context.Background(), job, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	html := get(t, f.http.URL+bigTrainPath, http.StatusOK)
	contains(t, html, `<tr data-podset="main">`)
	lacks(t, html, "Runs after", `class="error"`)
}

// only is an Access that lets the caller list the named resources in every namespace.
type only []string

func (o only) CanList(_ context.Context, gr schema.GroupResource, ns string) (bool, error) {
	return ns != "" && slices.Contains(o, gr.Resource), nil
}

// The chain is shown only to a caller who may list the namespace's Jobs, and a job's link
// only where the caller may read its Workload; the rest of the page is the same.
func TestWorkloadPageShowsTheChainToWhoMayListJobs(t *testing.T) {
	f := newFixture(t)
	withPipeline(t, f)
	for _, c := range []struct {
		name   string
		access only
		want   string
	}{
		{name: "Workloads and Jobs", access: only{"workloads", "resourceclaimtemplates", "jobs"},
			want: `Runs after: <a href="/workloads/team-a/job-step-1-4d5e6">step-1</a> (Complete)`},
		{name: "Workloads, not Jobs", access: only{"workloads", "resourceclaimtemplates"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			page := get(t, serveAs(t, f, c.access)+bigTrainPath, http.StatusOK)
			contains(t, page, "Workload team-a/job-big-train-1a2b3", "job/big-train", `<tr data-podset="main">`)
			lacks(t, page, `class="error"`)
			if c.want == "" {
				lacks(t, page, "Runs after", "step-1")
				return
			}
			contains(t, page, c.want)
		})
	}
}

// cacheWith is a manager's cache over controller-runtime's fake client holding objs.
type cacheWith struct {
	client.Reader
	informers *informertest.FakeInformers
}

func (c cacheWith) GetInformer(ctx context.Context, obj client.Object, opts ...crcache.InformerGetOption) (crcache.Informer, error) {
	return c.informers.GetInformer(ctx, obj, opts...)
}

// Over a manager's cache, the view reads Jobs only when told the cache holds them: it then
// shows the chain; otherwise it starts no informer on Jobs (which its owner's RBAC may not
// allow) and shows the page without the chain.
func TestCacheShowsTheChainWhereItHoldsJobs(t *testing.T) {
	scheme := kruntime.NewScheme()
	for _, add := range []func(*kruntime.Scheme) error{corev1.AddToScheme, batchv1.AddToScheme, resourceapi.AddToScheme, kueue.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	objs := []client.Object{
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "train", Annotations: map[string]string{dependencies.RunAfterAnnotation: "prepare"}}},
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "prepare"},
			Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue}}}},
		&kueue.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "job-train-1a2b3",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: "uid-train"}}},
			Spec: kueue.WorkloadSpec{QueueName: "default"}},
	}
	jobGVK := batchv1.SchemeGroupVersion.WithKind("Job")
	for _, hasJobs := range []bool{true, false} {
		t.Run(fmt.Sprintf("CacheHasJobs=%v", hasJobs), func(t *testing.T) {
			informers := &informertest.FakeInformers{Scheme: scheme}
			c := cacheWith{Reader: ctrlfake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build(), informers: informers}
			srv, err := New(Options{Cache: c, CacheHasJobs: hasJobs})
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			hs := httptest.NewServer(srv)
			defer hs.Close()
			page := get(t, hs.URL+"/workloads/team-a/job-train-1a2b3", http.StatusOK)
			contains(t, page, "Workload team-a/job-train-1a2b3", "job/train")
			lacks(t, page, `class="error"`)
			_, watched := informers.InformersByGVK[jobGVK]
			if hasJobs {
				contains(t, page, `<p id="runs-after">Runs after: prepare (Failed)</p>`)
				if !watched {
					t.Error("the view does not watch the Jobs of the cache")
				}
				return
			}
			lacks(t, page, "Runs after")
			if watched {
				t.Error("the view started an informer on Jobs in a cache told not to hold them")
			}
		})
	}
}

// The Workload's priority is its own: a caller who may not read what the rest of the page
// needs (the claim templates) still sees it, beside the error.
func TestWorkloadPageShowsPriorityWhenTheRestCannotBeExplained(t *testing.T) {
	f := newFixture(t)
	page := get(t, serveAs(t, f, only{"workloads"})+bigTrainPath, http.StatusOK)
	contains(t, page, `<p id="priority">Priority 100 (no priority class)</p>`, `class="error"`)
}

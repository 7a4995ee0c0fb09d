package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/internal/callerauth/callerauthtest"
	"github.com/gpudra/gpudra/webview"
)

// reviewer is an API server that answers TokenReviews ("alice-token" is alice,
// "prometheus-token" is prometheus, and a review of "outage-token" fails) and
// SubjectAccessReviews: alice may get /dashboard and /dashboard/*, and list in namespace
// team-b only; prometheus may get /metrics.
func reviewer(t *testing.T) *httptest.Server {
	return callerauthtest.Reviewer{
		Users: map[string]string{"alice-token": "alice", "prometheus-token": "prometheus"},
		Allow: func(s authzv1.SubjectAccessReviewSpec) bool {
			nr, ra := s.NonResourceAttributes, s.ResourceAttributes
			return s.User == "alice" && (nr != nil && nr.Verb == "get" &&
				(nr.Path == dashboardPath || strings.HasPrefix(nr.Path, dashboardPath+"/")) ||
				ra != nil && ra.Verb == "list" && ra.Namespace == "team-b") ||
				callerauthtest.GetsPath(s, "prometheus", "/metrics")
		},
	}.Serve(t)
}

// getWithToken GETs url with the bearer token, unless "", and returns the status and body.
func getWithToken(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestDashboardNeedsAnAuthorizedToken(t *testing.T) {
	api := reviewer(t)
	auth, err := newDashboardAuth(callerauthtest.JSONConfig(api.URL), api.Client())
	if err != nil {
		t.Fatal(err)
	}
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "view of "+r.URL.Path) })
	srv := httptest.NewServer(auth.wrap(inner, klog.Background()))
	defer srv.Close()
	for _, c := range []struct {
		name, token, path string
		want              int
	}{
		{"no token", "", "/dashboard/", http.StatusUnauthorized},
		{"a token the API server rejects", "mallory-token", "/dashboard/", http.StatusUnauthorized},
		{"the API server failing to review the token", "outage-token", "/dashboard/", http.StatusServiceUnavailable},
		{"authorized", "alice-token", "/dashboard/nodes/gpu-node-a", http.StatusOK},
		{"outside the dashboard's URLs", "alice-token", "/metrics", http.StatusForbidden},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body := getWithToken(t, srv.URL+c.path, c.token)
			if code != c.want {
				t.Fatalf("GET %s: %d %s, want %d", c.path, code, body, c.want)
			}
			if served := strings.HasPrefix(body, "view of "); served != (c.want == http.StatusOK) {
				t.Fatalf("GET %s: the view answered %q", c.path, body)
			}
		})
	}
}

// fakeCache is a manager's cache over controller-runtime's fake client.
type fakeCache struct {
	client.Reader
	informers *informertest.FakeInformers
}

func (c fakeCache) GetInformer(ctx context.Context, obj client.Object, opts ...crcache.InformerGetOption) (crcache.Informer, error) {
	return c.informers.GetInformer(ctx, obj, opts...)
}

func TestDashboardShowsACallerOnlyItsNamespaces(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, resourceapi.AddToScheme, kueue.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	var objs []client.Object
	for _, ns := range []string{"team-a", "team-b"} {
		objs = append(objs,
			&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ns + "-claim"}},
			&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ns + "-pod"},
				Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(ns + "-claim")}}}},
			&kueue.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ns + "-workload"}})
	}
	objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-node-a"}},
		&kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: "every-team"}})
	cache := fakeCache{Reader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build(),
		informers: &informertest.FakeInformers{Scheme: scheme}}

	api := reviewer(t)
	auth, err := newDashboardAuth(callerauthtest.JSONConfig(api.URL), api.Client())
	if err != nil {
		t.Fatal(err)
	}
	view, err := webview.New(webview.Options{Cache: cache, Base: dashboardPath, Access: auth.access})
	if err != nil {
		t.Fatal(err)
	}
	if err := view.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(auth.wrap(dashboardMux(view), klog.Background()))
	defer srv.Close()
	for _, c := range []struct {
		name, path       string
		want             int
		shows, withholds []string
	}{
		{"cluster page", "/dashboard/", http.StatusOK, []string{"team-b-pod", "team-b-claim"}, []string{"team-a", "gpu-node-a"}},
		{"queues page", "/dashboard/queues", http.StatusOK, []string{"team-b-workload"}, []string{"team-a-workload", "every-team"}},
		{"its own claim", "/dashboard/claims/team-b/team-b-claim", http.StatusOK, []string{"Claim team-b/team-b-claim"}, nil},
		{"another namespace's claim", "/dashboard/claims/team-a/team-a-claim", http.StatusNotFound, nil, nil},
		{"another namespace's pod", "/dashboard/pods/team-a/team-a-pod", http.StatusNotFound, nil, nil},
		{"its own Workload", "/dashboard/workloads/team-b/team-b-workload", http.StatusOK, []string{"Workload team-b/team-b-workload"}, []string{"team-a"}},
		{"another namespace's Workload", "/dashboard/workloads/team-a/team-a-workload", http.StatusNotFound, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+c.path, nil)
			req.Header.Set("Authorization", "Bearer alice-token")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Fatalf("GET %s: %d, want %d:\n%s", c.path, resp.StatusCode, c.want, body)
			}
			for _, s := range c.shows {
				if !strings.Contains(string(body), s) {
					t.Errorf("GET %s lacks %q:\n%s", c.path, s, body)
				}
			}
			for _, s := range c.withholds {
				if strings.Contains(string(body), s) {
					t.Errorf("GET %s shows %q to a caller who may not list it:\n%s", c.path, s, body)
				}
			}
		})
	}
}

func TestDashboardFlags(t *testing.T) {
	o := parse(t, "--feature-gates=WebView=true", "--dashboard-bind-address=:8444", "--dashboard-cert-dir=/dashboard-certs")
	if o.dashboardAddr != ":8444" || o.dashboardCertDir != "/dashboard-certs" {
		t.Fatalf("flags parsed to %q, %q", o.dashboardAddr, o.dashboardCertDir)
	}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	o = parse(t, "--dashboard-cert-dir=/dashboard-certs")
	if err := o.validate(); err == nil || !strings.Contains(err.Error(), "only with --dashboard-bind-address") {
		t.Fatalf("--dashboard-cert-dir alone: %v", err)
	}
	if o := parse(t); o.dashboardAddr != "" {
		t.Fatalf("the dashboard is on by default at %q", o.dashboardAddr)
	}
}

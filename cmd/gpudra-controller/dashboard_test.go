package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/rest"
)

// reviewer is an API server that answers TokenReviews (token "alice-token" is alice) and
// SubjectAccessReviews (alice may get /dashboard and /dashboard/*).
func reviewer(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/apis/authentication.k8s.io/v1/tokenreviews":
			var tr authnv1.TokenReview
			if err := json.NewDecoder(r.Body).Decode(&tr); err != nil {
				t.Error(err)
			}
			tr.Status = authnv1.TokenReviewStatus{Authenticated: tr.Spec.Token == "alice-token", User: authnv1.UserInfo{Username: "alice"}}
			_ = json.NewEncoder(w).Encode(&tr)
		case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
			var sar authzv1.SubjectAccessReview
			if err := json.NewDecoder(r.Body).Decode(&sar); err != nil {
				t.Error(err)
			}
			nr := sar.Spec.NonResourceAttributes
			sar.Status.Allowed = sar.Spec.User == "alice" && nr != nil && nr.Verb == "get" &&
				(nr.Path == dashboardPath || strings.HasPrefix(nr.Path, dashboardPath+"/"))
			_ = json.NewEncoder(w).Encode(&sar)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestDashboardNeedsAnAuthorizedToken(t *testing.T) {
	api := reviewer(t)
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "view of "+r.URL.Path) })
	h, err := authorized(&rest.Config{Host: api.URL}, api.Client(), inner)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, c := range []struct {
		name, token, path string
		want              int
	}{
		{"no token", "", "/dashboard/", http.StatusUnauthorized},
		// controller-runtime's filter answers a token the TokenReview rejects with 500.
		{"unknown token", "mallory-token", "/dashboard/", http.StatusInternalServerError},
		{"authorized", "alice-token", "/dashboard/nodes/gpu-node-a", http.StatusOK},
		{"outside the dashboard's URLs", "alice-token", "/metrics", http.StatusForbidden},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+c.path, nil)
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Fatalf("GET %s: %d %s, want %d", c.path, resp.StatusCode, body, c.want)
			}
			if served := strings.HasPrefix(string(body), "view of "); served != (c.want == http.StatusOK) {
				t.Fatalf("GET %s: the view answered %q", c.path, body)
			}
		})
	}
}

func TestDashboardFlags(t *testing.T) {
	o := parse(t, "--dashboard-bind-address=:8444", "--dashboard-cert-dir=/dashboard-certs")
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

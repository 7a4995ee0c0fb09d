package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpudra/gpudra/internal/callerauth/callerauthtest"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
)

// The secure metrics answer as docs/monitoring.md says: 401 for a missing or rejected
// token, 403 for a caller without get on /metrics, 503 when the API server cannot review
// the token, and the metrics to a caller allowed to read them.
func TestSecureMetricsAnswerEachCaller(t *testing.T) {
	o := parse(t, "--metrics-bind-address=:8443", "--metrics-secure")
	mo := o.managerOptions(runtime.NewScheme())
	api := reviewer(t)
	filter, err := mo.Metrics.FilterProvider(callerauthtest.JSONConfig(api.URL), api.Client())
	if err != nil {
		t.Fatal(err)
	}
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "gpudra_build_info 1") })
	h, err := filter(klog.Background(), inner)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, c := range []struct {
		name, token string
		want        int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a token the API server rejects", "mallory-token", http.StatusUnauthorized},
		{"the API server failing to review the token", "outage-token", http.StatusServiceUnavailable},
		{"a caller without get on /metrics", "alice-token", http.StatusForbidden},
		{"a caller allowed get on /metrics", "prometheus-token", http.StatusOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
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
				t.Fatalf("GET /metrics: %d %s, want %d", resp.StatusCode, body, c.want)
			}
			if served := strings.Contains(string(body), "gpudra_build_info"); served != (c.want == http.StatusOK) {
				t.Fatalf("GET /metrics answered %d with %q", resp.StatusCode, body)
			}
		})
	}
}

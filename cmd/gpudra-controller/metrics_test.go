package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/callerauth/callerauthtest"
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
			code, body := getWithToken(t, srv.URL+"/metrics", c.token)
			if code != c.want {
				t.Fatalf("GET /metrics: %d %s, want %d", code, body, c.want)
			}
			if served := strings.Contains(body, "gpudra_build_info"); served != (c.want == http.StatusOK) {
				t.Fatalf("GET /metrics answered %d with %q", code, body)
			}
		})
	}
}

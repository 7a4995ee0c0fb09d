package kubeletplugin_test

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"

	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpudra/gpudra/internal/callerauth/callerauthtest"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

// reviewingAPIServer is an API server that answers TokenReviews (token
// "prometheus-token" is prometheus, "tenant-token" is tenant, a review of "outage-token"
// fails, any other is rejected) and SubjectAccessReviews (prometheus may get /metrics; no
// one may do anything else).
func reviewingAPIServer(t *testing.T) kubernetes.Interface {
	return callerauthtest.Reviewer{
		Users: map[string]string{"prometheus-token": "prometheus", "tenant-token": "tenant"},
		Allow: func(s authzv1.SubjectAccessReviewSpec) bool {
			return callerauthtest.GetsPath(s, "prometheus", "/metrics")
		},
	}.Client(t)
}

// The plugin's metrics name every claim of the node and what it uses: over HTTPS, only a
// caller the API server authenticates and allows get on /metrics reads them. The
// kubelet's probes need no token.
func TestMetricsOnlyForAuthorizedCallers(t *testing.T) {
	d := newNode(t, "dgx-h100").newDriver(nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	addr, err := d.ServeMetrics(ctx, "127.0.0.1:0", plugin.MetricsAccess{Reviewer: reviewingAPIServer(t)})
	if err != nil {
		t.Fatal(err)
	}
	base := "https://" + addr.String()
	// The certificate is self-signed, as the kubelet's probes and the chart's monitors
	// (insecureSkipVerify) take it.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for _, c := range []struct {
		name, path, token string
		want              int
		body              string
	}{
		{name: "no token is unauthorized", path: "/metrics", want: http.StatusUnauthorized},
		{name: "a token the API server rejects is unauthorized", path: "/metrics", token: "stolen-token", want: http.StatusUnauthorized},
		{name: "a token the API server fails to review is a server error, not a refusal", path: "/metrics", token: "outage-token", want: http.StatusServiceUnavailable},
		{name: "an authenticated caller without get on /metrics is forbidden", path: "/metrics", token: "tenant-token", want: http.StatusForbidden},
		{name: "a caller allowed get on /metrics reads them", path: "/metrics", token: "prometheus-token", want: http.StatusOK, body: "gpudra_plugin_published_devices"},
		{name: "the liveness probe needs no token", path: "/livez", want: http.StatusOK, body: "ok"},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+c.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.want || !strings.Contains(string(body), c.body) {
				t.Fatalf("GET %s: %d %.200q, want %d with %q", c.path, resp.StatusCode, body, c.want, c.body)
			}
			if c.want != http.StatusOK && strings.Contains(string(body), "gpudra_plugin_") {
				t.Fatalf("GET %s answered %d with metrics: %.200q", c.path, resp.StatusCode, body)
			}
		})
	}
	// Plain HTTP gets nothing from the HTTPS server.
	if resp, err := http.Get("http://" + addr.String() + "/metrics"); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), "gpudra_plugin_") {
			t.Fatalf("plain HTTP read the metrics: %d", resp.StatusCode)
		}
	}
}

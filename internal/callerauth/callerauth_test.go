package callerauth

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	authzv1 "k8s.io/api/authorization/v1"
	genericrequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/callerauth/callerauthtest"
)

// fakeReviewer is an API server that authenticates "prometheus-token" (prometheus) and
// "tenant-token" (tenant), rejects every other token ("expired-token" with a reason),
// fails to review "outage-token", and allows prometheus get on /metrics; it fails to
// review tenant's access when accessOutage is set.
func fakeReviewer(t *testing.T, accessOutage bool) kubernetes.Interface {
	return callerauthtest.Reviewer{
		Users:    map[string]string{"prometheus-token": "prometheus", "tenant-token": "tenant"},
		Rejected: map[string]string{"expired-token": "token has expired"},
		Allow: func(s authzv1.SubjectAccessReviewSpec) bool {
			return callerauthtest.GetsPath(s, "prometheus", "/metrics")
		},
		AccessOutage: map[string]bool{"tenant": accessOutage},
	}.Client(t)
}

func TestWrapAnswersEachCaller(t *testing.T) {
	accessReviewRetry.Steps = 1 // a failed review is not retried for seconds
	for _, c := range []struct {
		name, token  string
		accessOutage bool
		want         int
	}{
		{name: "no token is unauthorized", want: http.StatusUnauthorized},
		{name: "a token the API server rejects is unauthorized", token: "stolen-token", want: http.StatusUnauthorized},
		{name: "a token rejected with a reason is unauthorized", token: "expired-token", want: http.StatusUnauthorized},
		{name: "a token review that fails is a server error", token: "outage-token", want: http.StatusServiceUnavailable},
		{name: "a caller without get on the path is forbidden", token: "tenant-token", want: http.StatusForbidden},
		{name: "an access review that fails is a server error", token: "tenant-token", accessOutage: true, want: http.StatusServiceUnavailable},
		{name: "a caller allowed get on the path is served", token: "prometheus-token", want: http.StatusOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			auth, err := New(fakeReviewer(t, c.accessOutage), Options{Realm: "gpudra-test"})
			if err != nil {
				t.Fatal(err)
			}
			inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				u, _ := genericrequest.UserFrom(r.Context())
				_, _ = io.WriteString(w, "metrics for "+u.GetName())
			})
			req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			rec := httptest.NewRecorder()
			auth.Wrap(inner, klog.Background()).ServeHTTP(rec, req)
			body := rec.Body.String()
			if rec.Code != c.want {
				t.Fatalf("GET /metrics: %d %q, want %d", rec.Code, body, c.want)
			}
			if served := strings.HasPrefix(body, "metrics for "); served != (c.want == http.StatusOK) {
				t.Fatalf("GET /metrics answered %d with %q", rec.Code, body)
			}
			if c.want == http.StatusOK && body != "metrics for prometheus" {
				t.Fatalf("the handler saw the caller as %q", body)
			}
			if got := rec.Header().Get("WWW-Authenticate"); (got != "") != (c.want == http.StatusUnauthorized) {
				t.Fatalf("WWW-Authenticate %q with %d", got, rec.Code)
			}
		})
	}
}

package callerauthtest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// OutageToken is the token whose review always fails, as when the API server is down.
const OutageToken = "outage-token"

// Reviewer answers TokenReviews and SubjectAccessReviews. A token in Users authenticates
// as its user; one in Rejected is refused with its reason; a review of OutageToken fails;
// any other token is refused without a reason.
type Reviewer struct {
	Users    map[string]string
	Rejected map[string]string
	// Allow decides a SubjectAccessReview; a review for a user in AccessOutage fails.
	Allow        func(authzv1.SubjectAccessReviewSpec) bool
	AccessOutage map[string]bool
}

// GetsPath allows user get on the non-resource path (as on /metrics).
func GetsPath(spec authzv1.SubjectAccessReviewSpec, user, path string) bool {
	nr := spec.NonResourceAttributes
	return spec.User == user && nr != nil && nr.Verb == "get" && nr.Path == path
}

// Serve starts the API server, closed when the test ends.
func (rv Reviewer) Serve(t testing.TB) *httptest.Server {
	fail := func(w http.ResponseWriter) {
		w.WriteHeader(http.StatusInternalServerError)
		_ = json.NewEncoder(w).Encode(&metav1.Status{Status: metav1.StatusFailure, Code: 500, Reason: metav1.StatusReasonInternalError, Message: "etcdserver: request timed out"})
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/apis/authentication.k8s.io/v1/tokenreviews":
			var tr authnv1.TokenReview
			if err := json.NewDecoder(r.Body).Decode(&tr); err != nil {
				t.Error(err)
			}
			tok := tr.Spec.Token
			if tok == OutageToken {
				fail(w)
				return
			}
			if reason, ok := rv.Rejected[tok]; ok {
				tr.Status = authnv1.TokenReviewStatus{Error: reason}
			} else {
				name, ok := rv.Users[tok]
				tr.Status = authnv1.TokenReviewStatus{Authenticated: ok, User: authnv1.UserInfo{Username: name}}
			}
			_ = json.NewEncoder(w).Encode(&tr)
		case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
			var sar authzv1.SubjectAccessReview
			if err := json.NewDecoder(r.Body).Decode(&sar); err != nil {
				t.Error(err)
			}
			if rv.AccessOutage[sar.Spec.User] {
				fail(w)
				return
			}
			sar.Status.Allowed = rv.Allow != nil && rv.Allow(sar.Spec)
			_ = json.NewEncoder(w).Encode(&sar)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// Client serves the API server and returns a clientset talking to it.
func (rv Reviewer) Client(t testing.TB) kubernetes.Interface {
	srv := rv.Serve(t)
	kube, err := kubernetes.NewForConfig(JSONConfig(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	return kube
}

// JSONConfig talks to the API server at host in JSON, which it reads (clientsets default
// to protobuf).
func JSONConfig(host string) *rest.Config {
	return &rest.Config{Host: host, ContentConfig: rest.ContentConfig{ContentType: runtime.ContentTypeJSON}}
}

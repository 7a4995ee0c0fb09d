package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	tokencache "k8s.io/apiserver/pkg/authentication/token/cache"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	genericrequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes"
	authnv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/webview"
)

// How long the API server's answers are reused: a token's review, and a caller's access
// decision (the authorizer's cache holds at most 8192 of them).
const (
	tokenTTL        = time.Minute
	tokenFailureTTL = 10 * time.Second
	accessAllowTTL  = 30 * time.Second
	accessDenyTTL   = 10 * time.Second
)

// callerAuth authenticates a caller's bearer token with TokenReviews and authorizes its
// requests with SubjectAccessReviews: the path it asks for, and each resource and
// namespace the dashboard would show it.
type callerAuth struct {
	authn authenticator.Request
	authz authorizer.Authorizer
}

func newCallerAuth(cfg *rest.Config, httpClient *http.Client) (*callerAuth, error) {
	kube, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: kube.AuthorizationV1(),
		AllowCacheTTL:             accessAllowTTL,
		DenyCacheTTL:              accessDenyTTL,
		WebhookRetryBackoff:       &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5},
	}.New()
	if err != nil {
		return nil, fmt.Errorf("dashboard authorizer: %w", err)
	}
	tokens := tokencache.New(tokenReviewer{kube.AuthenticationV1().TokenReviews()}, false, tokenTTL, tokenFailureTTL)
	return &callerAuth{authn: bearertoken.New(tokens), authz: authz}, nil
}

// reviewFailed is an error of the API server reviewing a token, not a verdict on it.
type reviewFailed struct{ err error }

func (e *reviewFailed) Error() string { return "reviewing the token: " + e.err.Error() }
func (e *reviewFailed) Unwrap() error { return e.err }

// tokenReviewer asks the API server who a token belongs to. A token it does not
// authenticate is refused (401); an API server that does not answer is an error (5xx).
type tokenReviewer struct {
	reviews authnv1client.TokenReviewInterface
}

func (t tokenReviewer) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	r, err := t.reviews.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return nil, false, &reviewFailed{err}
	}
	if !r.Status.Authenticated {
		return nil, false, nil
	}
	u := r.Status.User
	var extra map[string][]string
	if len(u.Extra) > 0 {
		extra = make(map[string][]string, len(u.Extra))
		for k, v := range u.Extra {
			extra[k] = v
		}
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra}}, true, nil
}

// wrap serves h to authenticated callers allowed to get the request's path, with the
// caller in the request's context.
func (a *callerAuth) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		logger := klog.FromContext(r.Context()).WithName("dashboard")
		webview.SecurityHeaders(w.Header())
		res, ok, err := a.authn.AuthenticateRequest(r)
		var failed *reviewFailed
		switch {
		case errors.As(err, &failed):
			logger.Error(err, "Authenticating a dashboard caller")
			http.Error(w, "the API server could not review the token; try again", http.StatusServiceUnavailable)
			return
		case !ok:
			logger.V(4).Info("Dashboard caller not authenticated", "err", err)
			w.Header().Set("WWW-Authenticate", `Bearer realm="gpudra-dashboard"`)
			http.Error(w, "Unauthorized: send a bearer token the API server accepts", http.StatusUnauthorized)
			return
		}
		attrs := authorizer.AttributesRecord{User: res.User, Verb: strings.ToLower(r.Method), Path: r.URL.Path}
		decision, reason, err := a.authz.Authorize(r.Context(), attrs)
		if err != nil {
			logger.Error(err, "Authorizing a dashboard caller", "user", res.User.GetName(), "path", r.URL.Path)
			http.Error(w, "the API server could not review the request; try again", http.StatusServiceUnavailable)
			return
		}
		if decision != authorizer.DecisionAllow {
			logger.V(4).Info("Dashboard caller not allowed", "user", res.User.GetName(), "path", r.URL.Path, "reason", reason)
			http.Error(w, fmt.Sprintf("Forbidden: user %q may not %s %s", res.User.GetName(), attrs.Verb, r.URL.Path), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r.WithContext(genericrequest.WithUser(r.Context(), res.User)))
	})
}

// access is what the request's caller may list, asked of the API server.
func (a *callerAuth) access(r *http.Request) webview.Access {
	u, _ := genericrequest.UserFrom(r.Context())
	return callerAccess{authz: a.authz, user: u}
}

type callerAccess struct {
	authz authorizer.Authorizer
	user  user.Info
}

func (c callerAccess) CanList(ctx context.Context, resource schema.GroupResource, namespace string) (bool, error) {
	if c.user == nil {
		return false, nil
	}
	decision, _, err := c.authz.Authorize(ctx, authorizer.AttributesRecord{User: c.user, Verb: "list", ResourceRequest: true,
		APIGroup: resource.Group, Resource: resource.Resource, Namespace: namespace})
	if err != nil {
		return false, fmt.Errorf("may %s list %s in %q: %w", c.user.GetName(), resource, namespace, err)
	}
	return decision == authorizer.DecisionAllow, nil
}

package callerauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	"k8s.io/klog/v2"
)

// How long a token's review is reused, and how long one review may take.
const (
	tokenTTL        = time.Minute
	tokenFailureTTL = 10 * time.Second
	reviewTimeout   = 10 * time.Second
)

// accessReviewRetry is how a SubjectAccessReview the API server fails is retried
// (k8s.io/apiserver's default for authorization webhooks).
var accessReviewRetry = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// Options say how the API server's answers are reused and how a refused caller is told.
type Options struct {
	// Realm is the realm of the WWW-Authenticate header sent with a 401.
	Realm string
	// AllowTTL and DenyTTL are how long an access decision is reused (at most 8192 are
	// kept); 0 asks the API server every time.
	AllowTTL, DenyTTL time.Duration
}

// Auth admits the callers the API server authenticates and authorizes.
type Auth struct {
	authn authenticator.Request
	authz authorizer.Authorizer
	realm string
}

// New makes an Auth that reviews tokens and access through kube (RBAC: create
// tokenreviews and subjectaccessreviews).
func New(kube kubernetes.Interface, o Options) (*Auth, error) {
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: kube.AuthorizationV1(),
		AllowCacheTTL:             o.AllowTTL,
		DenyCacheTTL:              o.DenyTTL,
		WebhookRetryBackoff:       &accessReviewRetry,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("caller authorizer: %w", err)
	}
	// Errors are not cached: the next request reviews the token again.
	tokens := tokencache.New(tokenReviewer{kube.AuthenticationV1().TokenReviews()}, false, tokenTTL, tokenFailureTTL)
	return &Auth{authn: bearertoken.New(tokens), authz: authz, realm: o.Realm}, nil
}

// Authorizer asks the API server what a caller may do (SubjectAccessReviews, cached).
func (a *Auth) Authorizer() authorizer.Authorizer { return a.authz }

// reviewFailed is an error of the API server reviewing a token, not a verdict on it.
type reviewFailed struct{ err error }

func (e *reviewFailed) Error() string { return "reviewing the token: " + e.err.Error() }
func (e *reviewFailed) Unwrap() error { return e.err }

// tokenReviewer asks the API server who a token belongs to. A token it does not
// authenticate is refused; an API server that does not answer is a reviewFailed.
type tokenReviewer struct {
	reviews authnv1client.TokenReviewInterface
}

func (t tokenReviewer) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	r, err := t.reviews.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return nil, false, &reviewFailed{err}
	}
	if !r.Status.Authenticated {
		if r.Status.Error != "" {
			// The API server's reason (expired, unknown): still a refusal.
			return nil, false, errors.New(r.Status.Error)
		}
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

// Wrap serves h to the callers allowed the request's verb on its path (a non-resource
// URL), with the caller in the request's context (k8s.io/apiserver's UserFrom): 401
// without a bearer token the API server accepts, 403 without the permission, 503 when
// the API server cannot review the token or the access.
func (a *Auth) Wrap(h http.Handler, logger klog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, ok, err := a.authn.AuthenticateRequest(r)
		var failed *reviewFailed
		switch {
		case errors.As(err, &failed):
			logger.Error(err, "Authenticating a caller", "path", r.URL.Path)
			http.Error(w, "the API server could not review the token; try again", http.StatusServiceUnavailable)
			return
		case !ok:
			logger.V(4).Info("Caller not authenticated", "remote", r.RemoteAddr, "path", r.URL.Path, "err", err)
			w.Header().Set("WWW-Authenticate", fmt.Sprintf("Bearer realm=%q", a.realm))
			http.Error(w, "Unauthorized: send a bearer token the API server accepts", http.StatusUnauthorized)
			return
		}
		attrs := authorizer.AttributesRecord{User: res.User, Verb: strings.ToLower(r.Method), Path: r.URL.Path}
		decision, reason, err := a.authz.Authorize(r.Context(), attrs)
		if err != nil {
			logger.Error(err, "Authorizing a caller", "user", res.User.GetName(), "path", r.URL.Path)
			http.Error(w, "the API server could not review the request; try again", http.StatusServiceUnavailable)
			return
		}
		if decision != authorizer.DecisionAllow {
			logger.V(4).Info("Caller not allowed", "user", res.User.GetName(), "path", r.URL.Path, "reason", reason)
			http.Error(w, fmt.Sprintf("Forbidden: user %q may not %s %s", res.User.GetName(), attrs.Verb, r.URL.Path), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r.WithContext(genericrequest.WithUser(r.Context(), res.User)))
	})
}

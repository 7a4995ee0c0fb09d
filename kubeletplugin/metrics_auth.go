package kubeletplugin

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
)

// MetricsAccess is who may read the plugin's metrics, which name every claim of the node
// and what it uses. With a Reviewer they are served over HTTPS, and /metrics only to
// callers whose bearer token the API server authenticates (TokenReview) and authorizes for
// get on the non-resource URL /metrics (SubjectAccessReview), as the controller's secure
// metrics are; the probes (/readyz, /livez) answer anyone. Without one, everything is
// plain HTTP for anyone who reaches the address.
type MetricsAccess struct {
	// Reviewer makes the TokenReviews and SubjectAccessReviews (RBAC: create
	// tokenreviews and subjectaccessreviews); nil serves plain HTTP.
	Reviewer kubernetes.Interface
	// TLS is the server's TLS configuration; nil with a Reviewer: a self-signed
	// certificate made at start, as controller-runtime's secure metrics make one.
	TLS *tls.Config
}

// secure reports whether metrics are served over HTTPS to authorized callers.
func (a MetricsAccess) secure() bool { return a.Reviewer != nil }

// metricsReviewBackoff is how the reviews are retried when the API server fails them
// (k8s.io/apiserver's default for authentication and authorization webhooks).
var metricsReviewBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// authorized wraps h so that only callers the API server authenticates and authorizes
// for get on the request's path reach it: 401 without a valid bearer token (missing,
// unknown or expired, as the API server answers it), 403 without the permission, 500
// when the review itself fails.
func (a MetricsAccess) authorized(h http.Handler, logger klog.Logger) (http.Handler, error) {
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
		TokenAccessReviewClient:  a.Reviewer.AuthenticationV1(),
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      &metricsReviewBackoff,
		CacheTTL:                 time.Minute,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("metrics authentication: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: a.Reviewer.AuthorizationV1(),
		AllowCacheTTL:             5 * time.Minute,
		DenyCacheTTL:              30 * time.Second,
		WebhookRetryBackoff:       &metricsReviewBackoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("metrics authorization: %w", err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, ok, err := authn.AuthenticateRequest(r)
		if err != nil || !ok {
			// A token the TokenReview rejects comes back as an error: either way the
			// caller is not authenticated.
			logger.V(4).Info("Metrics request not authenticated", "remote", r.RemoteAddr, "err", err)
			w.Header().Set("WWW-Authenticate", `Bearer realm="gpudra-kubelet-plugin"`)
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		attrs := authorizer.AttributesRecord{User: res.User, Verb: strings.ToLower(r.Method), Path: r.URL.Path}
		decision, reason, err := authz.Authorize(r.Context(), attrs)
		if err != nil {
			logger.Error(err, "Authorizing a metrics request", "user", res.User.GetName())
			http.Error(w, "Authorization failed", http.StatusInternalServerError)
			return
		}
		if decision != authorizer.DecisionAllow {
			logger.V(4).Info("Metrics request denied", "user", res.User.GetName(), "reason", reason)
			http.Error(w, fmt.Sprintf("Forbidden: user %q may not %s %s", res.User.GetName(), attrs.Verb, r.URL.Path), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	}), nil
}

// tlsConfig is the HTTPS server's configuration: TLS, or a self-signed certificate.
func (a MetricsAccess) tlsConfig() (*tls.Config, error) {
	if a.TLS != nil {
		return a.TLS, nil
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("gpudra-kubelet-plugin", nil, nil)
	if err != nil {
		return nil, fmt.Errorf("metrics serving certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("metrics serving certificate: %w", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}, nil
}

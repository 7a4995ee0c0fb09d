package kubeletplugin

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"time"

	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/callerauth"
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

// authorized wraps h so that only callers the API server authenticates and authorizes
// for get on the request's path reach it: 401 without a valid bearer token (missing,
// unknown or expired, as the API server answers it), 403 without the permission, 503
// when the API server cannot review the token or the access. A scraper asks every few
// seconds: its access decision is reused for minutes, a denial for half a minute.
func (a MetricsAccess) authorized(h http.Handler, logger klog.Logger) (http.Handler, error) {
	auth, err := callerauth.New(a.Reviewer, callerauth.Options{Realm: "gpudra-kubelet-plugin", AllowTTL: 5 * time.Minute, DenyTTL: 30 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return auth.Wrap(h, logger), nil
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

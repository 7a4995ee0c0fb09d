package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericrequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/gpudra/gpudra/internal/callerauth"
	"github.com/gpudra/gpudra/webview"
)

// secureMetrics admits to the HTTPS metrics the callers the API server authenticates
// (TokenReview) and allows get on /metrics (SubjectAccessReview). A scraper asks every
// few seconds: its access decision is reused for minutes, a denial for half a minute.
func secureMetrics(cfg *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	kube, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	auth, err := callerauth.New(kube, callerauth.Options{Realm: "gpudra-controller", AllowTTL: 5 * time.Minute, DenyTTL: 30 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return func(log logr.Logger, h http.Handler) (http.Handler, error) { return auth.Wrap(h, log), nil }, nil
}

// dashboardAuth admits the dashboard's callers and asks what each may list: the path it
// asks for, and each resource and namespace the dashboard would show it. Access changes
// show within half a minute, denials within ten seconds.
type dashboardAuth struct {
	*callerauth.Auth
}

func newDashboardAuth(cfg *rest.Config, httpClient *http.Client) (dashboardAuth, error) {
	kube, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return dashboardAuth{}, err
	}
	auth, err := callerauth.New(kube, callerauth.Options{Realm: "gpudra-dashboard", AllowTTL: 30 * time.Second, DenyTTL: 10 * time.Second})
	if err != nil {
		return dashboardAuth{}, fmt.Errorf("dashboard: %w", err)
	}
	return dashboardAuth{auth}, nil
}

// wrap serves h, with the web view's security headers, to authenticated callers allowed
// to get the request's path, with the caller in the request's context.
func (a dashboardAuth) wrap(h http.Handler, logger klog.Logger) http.Handler {
	admitted := a.Wrap(h, logger)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		webview.SecurityHeaders(w.Header())
		admitted.ServeHTTP(w, r)
	})
}

// access is what the request's caller may list, asked of the API server.
func (a dashboardAuth) access(r *http.Request) webview.Access {
	u, _ := genericrequest.UserFrom(r.Context())
	return callerAccess{authz: a.Authorizer(), user: u}
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

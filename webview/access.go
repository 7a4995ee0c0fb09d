package webview

import (
	"context"
	"net/http"
	"slices"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Access says what one caller may read. The view shows a caller only the objects of
// resources and namespaces Access allows, whatever its cache holds.
type Access interface {
	// CanList reports whether the caller may list resource in namespace; namespace ""
	// asks for a cluster-scoped resource, or for every namespace at once. An error (the
	// API server could not answer) fails the request.
	CanList(ctx context.Context, resource schema.GroupResource, namespace string) (bool, error)
}

// The resources the pages show.
var (
	nodesResource   = schema.GroupResource{Resource: "nodes"}
	podsResource    = schema.GroupResource{Resource: "pods"}
	slicesResource  = schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceslices"}
	claimsResource  = schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}
	classesResource = schema.GroupResource{Group: "resource.k8s.io", Resource: "deviceclasses"}
	// The workload page also reads these, one object at a time.
	templatesResource       = schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaimtemplates"}
	resourceFlavorsResource = resourceFlavorsGVR.GroupResource()
	// jobsResource: the Workload's Job and the jobs it runs after (gpudra.dev/run-after).
	jobsResource = schema.GroupResource{Group: "batch", Resource: "jobs"}
)

type accessKey struct {
	resource  schema.GroupResource
	namespace string
}

// scope is one request's view: what its caller may read, asked once per resource and
// namespace.
type scope struct {
	ctx    context.Context
	access Access
	seen   map[accessKey]bool
	hidden []string
	err    error
}

func (s *Server) scope(r *http.Request) *scope {
	sc := &scope{ctx: r.Context(), seen: map[accessKey]bool{}}
	if s.opts.Access != nil {
		sc.access = s.opts.Access(r)
	}
	return sc
}

// can reports whether the caller may list resource in namespace (cluster-wide for "").
func (sc *scope) can(resource schema.GroupResource, namespace string) bool {
	if sc.access == nil {
		return true
	}
	if namespace != "" && sc.can(resource, "") {
		return true
	}
	k := accessKey{resource, namespace}
	if ok, found := sc.seen[k]; found {
		return ok
	}
	ok := false
	if sc.err == nil {
		var err error
		if ok, err = sc.access.CanList(sc.ctx, resource, namespace); err != nil {
			sc.err = err
			ok = false
		}
	}
	sc.seen[k] = ok
	if !ok && namespace != "" && !slices.Contains(sc.hidden, resource.Resource) {
		sc.hidden = append(sc.hidden, resource.Resource)
	}
	return ok
}

// canCluster is can for a cluster-scoped resource; a refusal is noted on the page.
func (sc *scope) canCluster(resource schema.GroupResource) bool {
	ok := sc.can(resource, "")
	if !ok && !slices.Contains(sc.hidden, resource.Resource) {
		sc.hidden = append(sc.hidden, resource.Resource)
	}
	return ok
}

// namespaced keeps the objects in namespaces where the caller may list resource.
func namespaced[T any](sc *scope, resource schema.GroupResource, objs []T, ns func(T) string) []T {
	if sc.access == nil {
		return objs
	}
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		if sc.can(resource, ns(o)) {
			out = append(out, o)
		}
	}
	return out
}

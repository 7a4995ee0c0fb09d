package webview

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/gpudra/gpudra/internal/explain"
)

// Explain is the claim and pod page: what gpudra explain says about them.
type Explain struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Pod and Claims are what gpudra explain reports.
	Pod    *explain.PodReport    `json:"pod,omitempty"`
	Claims []explain.ClaimReport `json:"claims,omitempty"`
	// Workload names the Kueue Workload a pod belongs to, in its namespace.
	Workload string `json:"workload,omitempty"`
	Error    string `json:"error,omitempty"`
}

// scopeReader reads what an explanation needs from the caches, as far as the request's
// caller may read it.
type scopeReader struct {
	s  *Server
	sc *scope
}

// failed is err, else the error of an access check that could not be answered.
func (r scopeReader) failed(err error) error {
	if err != nil {
		return err
	}
	return r.sc.err
}

func (r scopeReader) Pod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	pods, err := r.s.visiblePods(r.sc)
	if err = r.failed(err); err != nil {
		return nil, err
	}
	for _, p := range pods {
		if p.Namespace == namespace && p.Name == name {
			return p, nil
		}
	}
	return nil, apierrors.NewNotFound(podsResource, name)
}

func (r scopeReader) Nodes(context.Context) ([]*corev1.Node, error) {
	if !r.sc.canCluster(nodesResource) {
		return nil, r.failed(nil)
	}
	return r.s.src.nodes(r.sc.ctx)
}

func (r scopeReader) ActivePods(context.Context) ([]*corev1.Pod, error) {
	pods, err := r.s.visiblePods(r.sc)
	if err = r.failed(err); err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, 0, len(pods))
	for _, p := range pods {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out = append(out, p)
		}
	}
	return out, nil
}

func (r scopeReader) Claims(context.Context) ([]*resourceapi.ResourceClaim, error) {
	claims, err := r.s.visibleClaims(r.sc)
	return claims, r.failed(err)
}

func (r scopeReader) Slices(context.Context) ([]*resourceapi.ResourceSlice, error) {
	if !r.sc.canCluster(slicesResource) {
		return nil, r.failed(nil)
	}
	return r.s.src.slices(r.sc.ctx)
}

func (r scopeReader) Classes(context.Context) ([]*resourceapi.DeviceClass, error) {
	if !r.sc.canCluster(classesResource) {
		return nil, r.failed(nil)
	}
	return r.s.src.classes(r.sc.ctx)
}

func (s *Server) explainClaim(sc *scope, ns, name string) Explain {
	e := Explain{Kind: "claim", Namespace: ns, Name: name}
	rep, err := explain.Claim(sc.ctx, scopeReader{s, sc}, ns, name)
	if err != nil {
		e.Error = err.Error()
		return e
	}
	e.Claims = rep.Claims
	return e
}

// explainPod explains a pod; found is false when the caller may not read it or it does
// not exist.
func (s *Server) explainPod(sc *scope, ns, name string) (e Explain, found bool) {
	e = Explain{Kind: "pod", Namespace: ns, Name: name}
	rep, err := explain.Pod(sc.ctx, scopeReader{s, sc}, ns, name)
	if rep != nil {
		e.Pod, e.Claims = rep.Pod, rep.Claims
	}
	if err != nil {
		e.Error = err.Error()
		if apierrors.IsNotFound(err) {
			e.Error = "pod " + ns + "/" + name + " not found"
		}
	}
	var noClaims *explain.NoClaimsError
	found = rep != nil || errors.As(err, &noClaims)
	if found {
		if pod, err := (scopeReader{s, sc}).Pod(sc.ctx, ns, name); err == nil {
			e.Workload = s.podWorkload(sc, pod)
		}
	}
	return e, found
}

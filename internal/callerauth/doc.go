// Package callerauth admits HTTP callers the way the API server would: their bearer token
// is authenticated with a TokenReview and each request authorized with a
// SubjectAccessReview. A missing or rejected token gets 401, a caller without the
// permission 403, and only a review the API server fails to answer gets 503. The
// controller's metrics and dashboard and the kubelet plugin's metrics use it.
package callerauth

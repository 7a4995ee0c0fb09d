// Package callerauthtest is a fake API server for tests of endpoints that authenticate
// their callers' bearer tokens (TokenReview) and authorize them (SubjectAccessReview).
package callerauthtest

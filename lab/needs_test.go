//go:build !e2e

package lab

import "testing"

// lacking ends a test that needs something this machine lacks (why says what, and how to get
// it). A plain go test skips it; the whole suite (the e2e tag, make test) fails it instead.
func lacking(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Skipf(format, args...)
}

// Package webviewtest checks what a served web view answers: the Host headers it serves and
// the security headers on every answer, for the view's own tests and those of the binaries
// that serve it.
package webviewtest

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Host is a Host header and the status a request carrying it must get. "PORT" in Host
// stands for the port the view listens at.
type Host struct {
	Name, Host string
	Want       int
}

// viewBody is what the view answers; a refused request must not get it.
const viewBody = "cluster data"

// CheckHosts serves wrap(addr, view) on a fresh 127.0.0.1 listener at addr, where view
// answers viewBody with the headers secure sets, and asks it once per Host header: each
// request gets its status, the view's body only with 200, and the headers secure sets
// whether it is served or refused.
func CheckHosts(t *testing.T, wrap func(net.Addr, http.Handler) http.Handler, secure func(http.Header), hosts []Host) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	view := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		secure(w.Header())
		_, _ = io.WriteString(w, viewBody)
	})
	hs := httptest.NewUnstartedServer(wrap(ln.Addr(), view))
	hs.Listener.Close()
	hs.Listener = ln
	hs.Start()
	t.Cleanup(hs.Close)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	want := http.Header{}
	secure(want)
	for _, c := range hosts {
		t.Run(c.Name, func(t *testing.T) {
			host := strings.ReplaceAll(c.Host, "PORT", port)
			req, _ := http.NewRequest(http.MethodGet, hs.URL+"/", nil)
			req.Host = host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.Want {
				t.Fatalf("Host %s: %d %q, want %d", host, resp.StatusCode, body, c.Want)
			}
			if leaked := strings.Contains(string(body), viewBody); leaked != (c.Want == http.StatusOK) {
				t.Fatalf("Host %s: answered %q", host, body)
			}
			for name := range want {
				if got := resp.Header.Get(name); got != want.Get(name) {
					t.Errorf("Host %s: %s %q, want %q", host, name, got, want.Get(name))
				}
			}
		})
	}
}

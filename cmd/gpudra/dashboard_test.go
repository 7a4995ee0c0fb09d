package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gpudra/gpudra/webview"
)

func TestDashboardAnswersOnlyThisMachinesNames(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	view := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		webview.SecurityHeaders(w.Header())
		_, _ = io.WriteString(w, "claims of every namespace")
	})
	hs := httptest.NewUnstartedServer(localDashboard(ln.Addr(), view))
	hs.Listener.Close()
	hs.Listener = ln
	hs.Start()
	defer hs.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	for _, c := range []struct {
		name, host string
		want       int
	}{
		{"opened at 127.0.0.1", "127.0.0.1:" + port, http.StatusOK},
		{"opened at localhost", "localhost:" + port, http.StatusOK},
		{"a page at a name rebound to 127.0.0.1", "evil.example:" + port, http.StatusMisdirectedRequest},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, hs.URL+"/", nil)
			req.Host = c.host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Fatalf("Host %s: %d %q, want %d", c.host, resp.StatusCode, body, c.want)
			}
			if csp := resp.Header.Get("Content-Security-Policy"); csp != webview.ContentSecurityPolicy {
				t.Errorf("Host %s: Content-Security-Policy %q", c.host, csp)
			}
		})
	}
}
